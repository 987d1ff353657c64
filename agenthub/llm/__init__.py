"""The LLM layer: provider protocol and types, the Anthropic provider, the offline provider and the registry."""

from agenthub.llm.anthropic_provider import AnthropicProvider, RetryPolicy
from agenthub.llm.endpoint import Endpoint
from agenthub.llm.failures import ModelNotFoundError, is_overflow_message
from agenthub.llm.models import context_window, plausible_model_name
from agenthub.llm.offline import OfflineProvider
from agenthub.llm.presets import PRESETS
from agenthub.llm.registry import ProviderRegistry
from agenthub.llm.tokens import estimate_text_tokens, estimate_tokens
from agenthub.llm.types import LLMProvider, LLMRequest, LLMResponse, TextCallback

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
