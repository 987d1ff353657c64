"""The LLM package's names that load the Anthropic SDK on first use: there when asked for, typed for the checker."""

from __future__ import annotations

from pathlib import Path

import agenthub.llm
from agenthub.llm.anthropic_provider import AnthropicProvider, RetryPolicy
from tests.support.typecheck import mypy_says


def test_the_lazy_names_are_the_real_ones_when_asked_for() -> None:
    assert agenthub.llm.AnthropicProvider is AnthropicProvider
    assert agenthub.llm.RetryPolicy is RetryPolicy


def test_a_misspelled_name_from_the_llm_package_is_a_type_error(tmp_path: Path) -> None:
    """Its module `__getattr__` (the lazy names) must not make every other name `Any` to mypy."""
    out = mypy_says(
        tmp_path,
        "import agenthub.llm\n"
        "from agenthub.llm import AnthropicProvider, OfflineProviderr\n"
        "agenthub.llm.estimate_tokenz\n"
        "reveal_type(AnthropicProvider)\n",
    )
    assert 'Module "agenthub.llm" has no attribute "OfflineProviderr"' in out, out
    assert 'Module has no attribute "estimate_tokenz"' in out, out
    assert "agenthub.llm.anthropic_provider.AnthropicProvider" in out, out
