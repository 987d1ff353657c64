"""Images for the media tests and the image blocks a request carried."""

from __future__ import annotations

import io
import os
from typing import Any

from PIL import Image


def png(width: int, height: int, *, noise: bool = False, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A PNG; `noise` makes it incompressible (a big file), otherwise one flat colour."""
    if noise:
        image = Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
    else:
        image = Image.new("RGB", (width, height), color)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def image_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "image"
    ]
