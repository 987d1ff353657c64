"""The LLM layer: provider protocol and types, the Anthropic provider, the offline provider and the registry.

The Anthropic SDK takes seconds to import, so the names backed by it load on first use (PEP 562); an offline
start (no key configured) never imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agenthub.errors import ModelNotFoundError
from agenthub.llm.endpoint import Endpoint
from agenthub.llm.models import context_window, plausible_model_name
from agenthub.llm.offline import OfflineProvider
from agenthub.llm.presets import PRESETS
from agenthub.llm.registry import ProviderRegistry
from agenthub.llm.tokens import estimate_text_tokens, estimate_tokens
from agenthub.llm.types import LLMProvider, LLMRequest, LLMResponse, TextCallback

if TYPE_CHECKING:
    from agenthub.llm.anthropic_provider import AnthropicProvider, RetryPolicy
    from agenthub.llm.failures import is_overflow_message

_LAZY = {
    "AnthropicProvider": "agenthub.llm.anthropic_provider",
    "RetryPolicy": "agenthub.llm.anthropic_provider",
    "is_overflow_message": "agenthub.llm.failures",
}


if not TYPE_CHECKING:  # seen by mypy, a module `__getattr__` would make every misspelled name of this package `Any`

    def __getattr__(name: str) -> Any:
        if name in _LAZY:
            return getattr(importlib.import_module(_LAZY[name]), name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PRESETS",
    "AnthropicProvider",
    "Endpoint",
    "LLMProvider",
    "LLMRequest",
    "LLMResponse",
    "ModelNotFoundError",
    "OfflineProvider",
    "ProviderRegistry",
    "RetryPolicy",
    "TextCallback",
    "context_window",
    "estimate_text_tokens",
    "estimate_tokens",
    "is_overflow_message",
    "plausible_model_name",
]
