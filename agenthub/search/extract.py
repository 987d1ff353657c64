"""What of a stored message is searchable: its text, tool inputs and tool results, never search/read_file results."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# tools whose results are never indexed: they only repeat what is indexed already (or a file), and would loop
UNINDEXED_RESULTS = frozenset({"memory_search", "read_file"})
# tools whose inputs are not indexed either: a past query must not come back as a hit of the next one
UNINDEXED_INPUTS = frozenset({"memory_search"})


def message_text(message: dict[str, Any], tool_names: dict[str, str], known_skipped: Callable[[str], bool]) -> str:
    """The searchable text of one history record; `tool_names` (tool_use id → name) grows as blocks are seen.

    `known_skipped(id)` answers for a `tool_result` whose `tool_use` was indexed in an earlier batch.
    """
    content = message.get("content")
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    parts = [_block_text(block, tool_names, known_skipped) for block in content if isinstance(block, dict)]
    return "\n".join(p for p in parts if p)


def skipped_tool_ids(message: dict[str, Any]) -> list[str]:
    """The ids of this record's `tool_use` blocks whose results are not indexed."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        str(b.get("id"))
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in UNINDEXED_RESULTS
    ]


def _block_text(block: dict[str, Any], tool_names: dict[str, str], known_skipped: Callable[[str], bool]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "").strip()
    if kind == "tool_use":
        name = str(block.get("name") or "")
        tool_names[str(block.get("id"))] = name
        if name in UNINDEXED_INPUTS:
            return ""
        return f"{name} {json.dumps(block.get('input') or {}, ensure_ascii=False)}"
    if kind == "tool_result":
        use_id = str(block.get("tool_use_id"))
        used = tool_names.get(use_id)
        if used in UNINDEXED_RESULTS or (used is None and known_skipped(use_id)):
            return ""
        return _result_text(block.get("content"))
    return ""


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        texts = [str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(t.strip() for t in texts if t.strip())
    return ""
