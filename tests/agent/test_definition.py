"""Agent definitions (agent.json + AGENTS.md), routing messages to agents, and one-turn model hints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agenthub.agent.definition import DEFAULT_PERSONA, load_agents
from agenthub.config import Settings
from agenthub.errors import AgentNotFoundError
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, NoticeEvent, ReplyEvent
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, http_error, reply_text
from tests.support.paths import REPO

REPO_AGENTS = REPO / "agents"


def _models(fake: FakeAnthropic) -> list[str]:
    return [r.body["model"] for r in fake.message_requests() if r.body is not None]


async def _turn(gw: GatewayCore, message: InboundMessage) -> list[ReplyEvent]:
    return [e async for e in await gw.submit(message)]


def test_agent_json_fields_are_loaded(tmp_path: Path) -> None:
    config = {
        "description": "code reviewer",
        "model": "claude-opus-4-1",
        "provider": "alt",
        "tools": ["get_time", "read_file"],
        "lock_timeout_s": 30,
        "memory": {"consolidate_at_tokens": 50000, "keep_recent": 10, "scope": "chat"},
        "system_allowed_paths": ["/srv/docs"],
    }
    write_agent(tmp_path, "reviewer", config, persona="You review code.\n")
    agent = load_agents(tmp_path).get("reviewer")
    assert agent.persona == "You review code."
    assert agent.config.model == "claude-opus-4-1" and agent.config.provider == "alt"
    assert agent.config.tools == ["get_time", "read_file"] and agent.config.lock_timeout_s == 30
    assert agent.config.memory.consolidate_at_tokens == 50000 and agent.config.memory.scope == "chat"
    assert agent.config.system_allowed_paths == ["/srv/docs"]


def test_the_shipped_default_agent_loads() -> None:
    registry = load_agents(REPO_AGENTS)
    assert registry.errors == {}
    agent = registry.get("default")
    assert agent.persona != DEFAULT_PERSONA and "read_memory" in agent.persona
    assert agent.config.lock_timeout_s == 120


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"lock_timeout_s": -1}', "lock_timeout_s"),
        ('{"colour": "blue"}', "colour"),
        ('{"memory": {"consolidate_at_tokens": 5}}', "memory.consolidate_at_tokens"),
        ('{"lock_timeout_s": Infinity}', "lock_timeout_s: Input should be a finite number"),
        ('{"lock_timeout_s": 1e300}', "lock_timeout_s"),
        ('{"mcp_call_timeout_s": NaN}', "mcp_call_timeout_s: Input should be a finite number"),
        ('{"mcp_start_wait_s": Infinity}', "mcp_start_wait_s: Input should be a finite number"),
    ],
)
def test_a_broken_agent_is_reported_by_name_and_others_load(tmp_path: Path, raw: str, reason: str) -> None:
    agents_dir = tmp_path / "agents"
    write_agent(agents_dir, "good")
    broken = write_agent(agents_dir, "broken")
    (broken / "agent.json").write_text(raw, encoding="utf-8")
    registry = load_agents(agents_dir)
    assert registry.names() == ["default", "good"]
    assert reason in registry.errors["broken"]
    with pytest.raises(AgentNotFoundError, match="broken"):
        registry.get("broken")


def test_bad_agent_directory_name_is_reported(tmp_path: Path) -> None:
    write_agent(tmp_path, "fine")
    (tmp_path / "bad:name").mkdir()
    registry = load_agents(tmp_path)
    assert "fine" in registry and "bad:name" in registry.errors


def test_a_missing_default_gets_a_builtin_one_but_a_broken_default_is_not_hidden(tmp_path: Path) -> None:
    assert load_agents(tmp_path / "none").get("default").persona == DEFAULT_PERSONA
    broken = write_agent(tmp_path, "default")
    (broken / "agent.json").write_text("{", encoding="utf-8")
    registry = load_agents(tmp_path)
    assert "default" not in registry and "default" in registry.errors


async def test_routing_explicit_then_binding_then_default(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(bindings={"wecom:bot2": "reviewer", "feishu": "helper"})
    for name in ("reviewer", "helper", "other"):
        write_agent(settings.agents_dir, name, persona=f"I am {name}.")
    async with build_gateway(settings) as gw:
        cases = [
            (InboundMessage("wecom", "zs", "zs", "x", cred_id="bot2"), "reviewer:wecom:zs"),
            (InboundMessage("wecom", "zs", "zs", "x", cred_id="bot1"), "default:wecom:zs"),
            (InboundMessage("feishu", "ou_1", "u", "x", cred_id="any"), "helper:feishu:ou_1"),
            (InboundMessage("wecom", "zs", "zs", "x", cred_id="bot2", agent="other"), "other:wecom:zs"),
            (InboundMessage("cli", "direct", "me", "x"), "default:cli:direct"),
        ]
        for message, expected in cases:
            _, key = gw.resolve_key(message)
            assert str(key) == expected
        final = await (await gw.submit(cases[0][0])).result()
        assert isinstance(final, DoneEvent) and final.session_key == "reviewer:wecom:zs"
    assert fake_llm.message_requests()[0].body["system"][0]["text"] == "I am reviewer."  # type: ignore[index]


async def test_bad_routing_input_ends_the_handle_with_a_clear_error(gateway: GatewayCore) -> None:
    unknown = await (await gateway.submit(InboundMessage("cli", "x", "me", "hi", agent="ghost"))).result()
    assert isinstance(unknown, ErrorEvent) and unknown.code == "unknown_agent" and "ghost" in unknown.message
    for chat_id in ("../etc", "a/b", "", "C:evil", "%2e%2e%2fx"):
        bad = await (await gateway.submit(InboundMessage("cli", chat_id, "me", "hi"))).result()
        assert isinstance(bad, ErrorEvent) and bad.code == "invalid_id", chat_id
    assert not (gateway.settings.data_dir / "etc").exists()


async def test_model_hint_applies_to_one_turn_only(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    agent = gateway.agents.get("default")
    before = agent.config.model_dump()
    events = await _turn(gateway, InboundMessage("cli", "direct", "me", "one", model_hint="claude-opus-4-1"))
    assert isinstance(events[-1], DoneEvent) and not any(isinstance(e, NoticeEvent) for e in events)
    await _turn(gateway, InboundMessage("cli", "direct", "me", "two"))
    assert _models(fake_llm) == ["claude-opus-4-1", gateway.settings.llm.model]
    assert gateway.agents.get("default").config.model_dump() == before


async def test_a_bad_model_hint_falls_back_with_a_warning(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    events = await _turn(gateway, InboundMessage("cli", "direct", "me", "hi", model_hint="no such model!"))
    notices = [e.text for e in events if isinstance(e, NoticeEvent)]
    assert len(notices) == 1 and "not a usable model name" in notices[0]
    assert isinstance(events[-1], DoneEvent)
    assert _models(fake_llm) == [gateway.settings.llm.model]


async def test_a_hinted_model_the_server_does_not_know_falls_back(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(http_error(404, "model: claude-nope not found"), reply_text("answered by default"))
    events = await _turn(gateway, InboundMessage("cli", "direct", "me", "hi", model_hint="claude-nope"))
    final = events[-1]
    assert isinstance(final, DoneEvent) and final.full_text == "answered by default"
    assert any(isinstance(e, NoticeEvent) and "claude-nope" in e.text for e in events)
    assert _models(fake_llm) == ["claude-nope", gateway.settings.llm.model]


async def test_agent_model_and_provider_hint(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    alt: dict[str, Any] = {"base_url": fake_llm.base_url, "api_key": "alt-key", "model": "alt-model"}
    settings = settings_factory(llm={"providers": {"alt": alt}})
    write_agent(settings.agents_dir, "pinned", {"model": "claude-haiku-4-5"})
    async with build_gateway(settings) as gw:
        await _turn(gw, InboundMessage("cli", "c", "me", "a", agent="pinned"))
        await _turn(gw, InboundMessage("cli", "c", "me", "b", agent="pinned", provider_hint="alt"))
        events = await _turn(gw, InboundMessage("cli", "c", "me", "c", agent="pinned", provider_hint="nope"))
        await _turn(gw, InboundMessage("cli", "c", "me", "d", agent="pinned"))
    assert _models(fake_llm) == ["claude-haiku-4-5", "alt-model", "claude-haiku-4-5", "claude-haiku-4-5"]
    auth = [r.headers.get("x-api-key") for r in fake_llm.message_requests()]
    assert auth == ["test-key", "alt-key", "test-key", "test-key"]
    assert any(isinstance(e, NoticeEvent) and "unknown provider" in e.text for e in events)


def test_shipped_agent_json_is_valid_json() -> None:
    raw = json.loads((REPO_AGENTS / "default" / "agent.json").read_text(encoding="utf-8"))
    assert set(raw) <= {"description", "model", "provider", "tools", "lock_timeout_s", "memory", "system_allowed_paths"}
