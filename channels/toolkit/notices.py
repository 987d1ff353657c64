"""How the platform channels show a reply's notices (compaction, fallback, queueing): lines above the reply."""

from __future__ import annotations

NOTICE_MARK = "ℹ️"


def with_notices(text: str, notices: list[str]) -> str:
    """`text` with each distinct notice on its own line above it, so nothing the gateway announced is silent."""
    shown = [f"{NOTICE_MARK} {n.strip()}" for n in dict.fromkeys(notices) if n.strip()]
    if not shown:
        return text
    head = "\n".join(shown)
    return f"{head}\n\n{text}" if text else head
