"""The welcome route: a fixed welcome when offline, and a read-only agents dir never breaks it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agenthub.api.llm_text import WELCOME_PROMPT
from agenthub.config import Settings
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.harness import RunningApi

OFFLINE = {"llm": {"offline": True}}


@pytest.fixture
def settings(settings_factory: Callable[..., Settings], request: pytest.FixtureRequest) -> Settings:
    """Settings (offline when parametrised with OFFLINE) with a `helper` agent that has a directory."""
    settings = settings_factory(**getattr(request, "param", {}))
    write_agent(settings.agents_dir, "helper", {"description": "旅行规划"}, persona="You plan trips.")
    return settings


@pytest.mark.parametrize("settings", [OFFLINE], indirect=True)
async def test_offline_welcome_is_fixed_and_not_cached(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    status, body = await api.call("GET", "/api/agents/helper/welcome")
    assert status == 200
    text = body["text"]
    assert "helper" in text and "旅行规划" in text
    assert "离线" in text  # the HTTP channel's default locale is zh-CN
    assert WELCOME_PROMPT not in text and "Write the short welcome" not in text
    assert not (api.gateway.settings.agents_dir / "helper" / "welcome.json").exists()
    status, body = await api.call("GET", "/api/agents/default/welcome")  # the built-in agent: no description
    assert status == 200 and "default" in body["text"] and "Write the short welcome" not in body["text"]
    assert fake_llm.message_requests() == []


@pytest.fixture
def read_only_helper(api: RunningApi) -> Iterator[Path]:
    """`agents/helper/` made unwritable like under ProtectSystem=strict. chmod 0o555 is enough for a normal
    user; root ignores the mode bits, so then `welcome.json` is also a directory, which no write can replace."""
    directory = api.gateway.settings.agents_dir / "helper"
    directory.chmod(0o555)
    if os.access(directory, os.W_OK):  # running as root
        directory.chmod(0o755)
        (directory / "welcome.json").mkdir()
        directory.chmod(0o555)
    try:
        yield directory
    finally:
        directory.chmod(0o755)


async def test_unwritable_welcome_cache_answers_from_memory_and_warns_once(
    api: RunningApi, fake_llm: FakeAnthropic, read_only_helper: Path
) -> None:
    fake_llm.script(reply_text("Hello, I plan trips."))
    with capture_logs() as logs:
        first = await api.call("GET", "/api/agents/helper/welcome")
        second = await api.call("GET", "/api/agents/helper/welcome")
    assert first == (200, {"agent": "helper", "text": "Hello, I plan trips."})
    assert second == first
    assert len(fake_llm.message_requests()) == 1  # kept in memory: the model is asked once
    warnings = [e for e in logs if e["event"] == "welcome_cache_not_writable"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning" and warnings[0]["agent"] == "helper"
    assert warnings[0]["path"] == str(read_only_helper / "welcome.json") and warnings[0]["error"]
    assert not (read_only_helper / "welcome.json").is_file()


async def test_writable_welcome_cache_is_written_once(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("Hello from helper."))
    with capture_logs() as logs:
        status, body = await api.call("GET", "/api/agents/helper/welcome")
    assert status == 200 and body["text"] == "Hello from helper."
    path = api.gateway.settings.agents_dir / "helper" / "welcome.json"
    assert json.loads(path.read_text(encoding="utf-8"))["text"] == "Hello from helper."
    assert not [e for e in logs if e["event"] == "welcome_cache_not_writable"]


@pytest.mark.parametrize("settings", [{**OFFLINE, "channels": {"http": {"locale": "en"}}}], indirect=True)
async def test_offline_welcome_follows_the_http_channels_locale(api: RunningApi) -> None:
    status, body = await api.call("GET", "/api/agents/helper/welcome")
    assert status == 200
    assert "offline placeholder" in body["text"] and "离线" not in body["text"]


async def test_a_lone_surrogate_in_the_models_welcome_is_replaced_and_the_cache_written(
    api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    """Half a UTF-16 pair (the vendor's JSON can carry `"\\ud800"`) cannot be written as UTF-8: the welcome holds
    U+FFFD in its place, as a message does, and welcome.json is written."""
    fake_llm.script(reply_text("Hello \ud800 from helper."))
    with capture_logs() as logs:
        status, body = await api.call("GET", "/api/agents/helper/welcome")
    assert status == 200 and body["text"] == "Hello \ufffd from helper."
    path = api.gateway.settings.agents_dir / "helper" / "welcome.json"
    assert json.loads(path.read_text(encoding="utf-8"))["text"] == "Hello \ufffd from helper."
    assert not [e for e in logs if e["log_level"] in ("warning", "error")]
