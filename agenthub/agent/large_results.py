"""Large tool results are moved, not cut: the full text goes to a file, the history keeps its head, tail and path."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import structlog

from agenthub.media.names import LARGE_RESULTS, chat_dir_name
from agenthub.session_keys import SessionKey
from agenthub.storage.atomic import atomic_write_text

log = structlog.get_logger(__name__)

DIRECTORY = LARGE_RESULTS
PREVIEW_CHARS = 2000
NEVER_MOVED = frozenset({"read_file", "memory_search"})
"""Their results are already pages of stored text: moving them would only send the model round in a loop."""


class LargeResultStore:
    """Moves a tool result over `threshold_chars` to `<workspace>/large_tool_results/<chat>/<sha256>.txt` (one file
    per distinct text of a chat, which only that chat's tools can read) and returns what the conversation keeps
    instead: the path, then the first and last `PREVIEW_CHARS` characters. `read_file` with `offset`/`limit` reads
    the file back in pages."""

    def __init__(self, workspace: Path, threshold_chars: int, *, key: SessionKey, readable: bool = True) -> None:
        self.workspace = workspace
        self.chat = chat_dir_name(key)
        self.threshold_chars = threshold_chars
        self.readable = readable
        """Whether the agent has `read_file`; the preview says how to read the rest, or that it cannot."""

    def should_move(self, tool: str, output: str) -> bool:
        return len(output) > self.threshold_chars and tool not in NEVER_MOVED

    async def keep(self, tool: str, output: str) -> str:
        """`output` itself when it is small enough (or from a tool whose results never move), else the preview."""
        if not self.should_move(tool, output):
            return output
        relative = f"{DIRECTORY}/{self.chat}/{hashlib.sha256(output.encode('utf-8')).hexdigest()}.txt"
        await asyncio.to_thread(_store, self.workspace / relative, output)
        log.info("tool_result_moved", tool=tool, chars=len(output), path=relative)
        return preview(output, relative, readable=self.readable)


def _store(path: Path, text: str) -> None:
    if not path.exists():  # content-addressed: the same text is already there
        atomic_write_text(path, text)


def preview(text: str, relative_path: str, *, readable: bool = True) -> str:
    """The path first (so any later cut of old tool results keeps it), then the head and the tail."""
    omitted = len(text) - 2 * PREVIEW_CHARS
    how = (
        f"read it with read_file (path {relative_path!r}, offset and limit in characters)"
        if readable
        else "read_file is not enabled for you, so only this preview is available"
    )
    return (
        f"[This result has {len(text)} characters. It is stored in full in your workspace at {relative_path}; "
        f"{how}. The first and last {PREVIEW_CHARS} characters follow.]\n"
        f"{text[:PREVIEW_CHARS]}\n[… {omitted} characters not shown …]\n{text[-PREVIEW_CHARS:]}"
    )
