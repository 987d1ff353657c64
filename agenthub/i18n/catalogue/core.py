"""Texts the core writes to chat users: turn errors and aborts, queue notices, command replies."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "error.internal": {
        "zh-CN": "抱歉，回答时我们这边出了问题。请再试一次（参考编号 {ref}）。",
        "en": "Sorry, something went wrong on our side while answering. Please try again (ref {ref}).",
    },
}
