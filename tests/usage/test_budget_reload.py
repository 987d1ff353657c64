"""An agent's `agent.json` budgets reloaded (SIGHUP: new definitions) apply from the next turn: its own claim and
its plans are worked out per loaded definition, never kept from the one before."""

from __future__ import annotations

from collections.abc import Callable

from agenthub.agent.definition import load_agents
from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage
from tests.support.budgets import MAX_TOKENS, used_by
from tests.support.fakes.anthropic import FakeAnthropic


async def test_a_reloaded_agent_limit_applies_to_the_next_turn_and_a_lifted_one_too(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(llm={"max_tokens": MAX_TOKENS})
    agent_dir = settings.agents_dir / "busy"
    agent_dir.mkdir(parents=True)
    config = agent_dir / "agent.json"
    config.write_text('{"budgets": {"agent_day": 1000000000, "chat_day": 1000000000}}', encoding="utf-8")
    (agent_dir / "AGENTS.md").write_text("You are busy.", encoding="utf-8")

    async def ask(text: str) -> object:
        final = await (await gw.submit(InboundMessage("cli", "c", "me", text, agent="busy"))).result()
        await used_by(gw, "me", "cli")  # its usage written
        return final

    async with build_gateway(settings) as gw:
        assert isinstance(await ask("first"), DoneEvent)  # the agent's lease (of the large limit) granted
        config.write_text('{"budgets": {"agent_day": 1}}', encoding="utf-8")
        gw.use_agents(load_agents(settings.agents_dir, default_agent=settings.default_agent))
        refused = await ask("after the reload")
        config.write_text('{"budgets": {}}', encoding="utf-8")
        gw.use_agents(load_agents(settings.agents_dir, default_agent=settings.default_agent))
        lifted = await ask("limit lifted")
    assert isinstance(refused, ErrorEvent) and refused.code == "budget_exceeded", refused
    assert isinstance(lifted, DoneEvent), lifted
