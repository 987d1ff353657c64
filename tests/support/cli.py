"""The environment a subprocess `agenthub` runs with in tests: tmp roots and the fake model."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.fakes.anthropic import FakeAnthropic


def cli_env(root: Path, llm: FakeAnthropic | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTHUB_", "ANTHROPIC_"))}
    env.update(
        AGENTHUB_DATA_DIR=str(root / "data"),
        AGENTHUB_AGENTS_DIR=str(root / "agents"),
        AGENTHUB_AUTH_DIR=str(root / "auth"),
        AGENTHUB_WORKSPACE_DIR=str(root / "workspace"),
        PYTHONUNBUFFERED="1",
    )
    if llm is not None:
        env.update(
            AGENTHUB_LLM__BASE_URL=llm.base_url,
            AGENTHUB_LLM__API_KEY="test-key",
            AGENTHUB_LLM__MAX_RETRIES="0",
            AGENTHUB_LLM__TIMEOUT_S="10",
        )
    return env
