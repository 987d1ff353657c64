"""The history-only shape of an image: a reference to a file in the agent's workspace, never the bytes."""

from __future__ import annotations

from typing import Any

REF_SOURCE = "agenthub_file"
"""`source.type` of a stored image block; `to_api_messages` turns it into a base64 source for the request."""


def image_ref(path: str, media_type: str) -> dict[str, Any]:
    """The stored block of an image saved at `path` (relative to `workspace/<agent>/`)."""
    return {"type": "image", "source": {"type": REF_SOURCE, "path": path, "media_type": media_type}}


def image_ref_source(block: Any) -> tuple[str, str] | None:
    """(path, media type) of a stored image reference block, None for any other block."""
    if not isinstance(block, dict) or block.get("type") != "image":
        return None
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != REF_SOURCE:
        return None
    path, media_type = source.get("path"), source.get("media_type")
    if not isinstance(path, str) or not isinstance(media_type, str) or not path:
        return None
    return path, media_type


def is_image_ref(block: Any) -> bool:
    return image_ref_source(block) is not None


def media_text(block: Any) -> str | None:
    """A short text form of an image block (`[image: <path>]`, or `[image]` for inline data) for summaries,
    search indexes and old turns; None for a block that is not an image."""
    if not isinstance(block, dict) or block.get("type") != "image":
        return None
    ref = image_ref_source(block)
    return f"[image: {ref[0]}]" if ref else "[image]"
