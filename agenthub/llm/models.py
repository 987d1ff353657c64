"""Known context windows by model-name prefix, and the sanity rule for one-turn model hints."""

from __future__ import annotations

import re

# Longest matching prefix wins; names are compared lower-cased. Keep models themselves in user config.
_CONTEXT_WINDOWS: dict[str, int] = {
    "claude-": 200_000,
    "deepseek": 128_000,
    "kimi-": 256_000,
    "moonshot-": 128_000,
    "glm-4.5": 128_000,
    "glm-4.6": 200_000,
    "glm-4.7": 200_000,
    "glm-5": 200_000,
    "glm-": 128_000,
    "minimax-": 200_000,
    "qwen3-max": 256_000,
    "qwen3-coder": 256_000,
    "qwen": 128_000,
    "ernie-": 128_000,
}

_MODEL_NAME = re.compile(r"[A-Za-z0-9._:/@-]+")
MAX_MODEL_NAME_CHARS = 100


def context_window(model: str, configured: int | None = None) -> int | None:
    """The context window of `model`: `configured` if given, else the built-in table, else None."""
    if configured is not None:
        return configured
    name = model.strip().lower()
    best = ""
    for prefix in _CONTEXT_WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return _CONTEXT_WINDOWS[best] if best else None


def plausible_model_name(model: str) -> bool:
    """False for names no provider can know: empty, over 100 chars, or characters outside `[A-Za-z0-9._:/@-]`."""
    return 0 < len(model) <= MAX_MODEL_NAME_CHARS and _MODEL_NAME.fullmatch(model) is not None
