"""Three instances on one database, every turn leased in three parts (the person's, the chat's, the agent's: one
grant, one timer for an instance's grants): 32 concurrent turns a wave at the agent's limit still overspend it by at
most one reservation, and what the store holds for the agent is no more than its open leases (a grant's parts end
together)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from agenthub.llm.tokens import estimate_text_tokens
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, ReplyEvent
from agenthub.storage.postgres.backend import PostgresStores
from agenthub.storage.usage import Scope
from agenthub.usage.report import totals
from tests.support.budgets import settle_all
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.shared_gateways import Instance, shared_instances

MAX_TOKENS = 200
TURNS = 32
BUDGETS = {"user_day": 10**9, "chat_day": 10**9, "agent_day": 12_000}


async def _wave(instances: Sequence[Instance], fake: FakeAnthropic, wave: int) -> list[ReplyEvent]:
    """32 people, each in a new chat, round robin over the instances, answered together; settlements written."""
    hold = asyncio.Event()
    fake.responder = lambda body: reply_text("ok", hold=hold)
    messages = [InboundMessage("wecom", f"g-{wave}-{n}", f"p-{n}", f"question {n}") for n in range(TURNS)]
    handles = await asyncio.gather(*(instances[n % 3].gateway.submit(m) for n, m in enumerate(messages)))
    finals = await settle_all(list(handles), fake, hold, timeout_s=60)
    for instance in instances:
        assert instance.gateway.turn_services.usage is not None
        await instance.gateway.turn_services.usage.gate.drain()
    return finals


async def test_32_concurrent_turns_leased_in_three_parts_on_three_instances_overspend_by_at_most_one(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    fake_llm.default_usage = {"input_tokens": 100, "output_tokens": 50}
    async with shared_instances(
        tmp_path, fake_llm, postgres_dsn, 3, budgets=BUDGETS, llm={"max_tokens": MAX_TOKENS}
    ) as instances:
        for wave in range(40):  # until a whole wave is refused: the limit reached (or held by leases)
            finals = await _wave(instances, fake_llm, wave)
            answered = sum(isinstance(f, DoneEvent) for f in finals)
            refused = sum(isinstance(f, ErrorEvent) and f.code == "budget_exceeded" for f in finals)
            assert answered + refused == TURNS
            if not answered:
                break
        else:
            raise AssertionError("the limit was never reached")
        granted = [
            i.gateway.turn_services.usage.gate.leases.granted_count for i in instances if i.gateway.turn_services.usage
        ]
        rows = await instances[0].stores.usage.days("2000-01-01", "2100-01-01")
    used = totals(rows, Scope("agent", "", "default"), "2000-01-01", {}).tokens
    reservation = MAX_TOKENS + 1 + estimate_text_tokens(f"question {TURNS - 1}")
    assert 0 < used <= BUDGETS["agent_day"] + reservation
    assert all(granted)  # every instance admitted turns from leases of its own


async def test_with_no_turn_running_the_agent_scope_holds_no_more_than_its_open_leases(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    fake_llm.default_usage = {"input_tokens": 100, "output_tokens": 50}
    async with shared_instances(
        tmp_path, fake_llm, postgres_dsn, 3, budgets=BUDGETS, llm={"max_tokens": MAX_TOKENS}
    ) as instances:
        finals = await _wave(instances, fake_llm, 0)
        assert all(isinstance(f, DoneEvent) for f in finals)  # far from the limit: all answered
        stores = instances[0].stores
        assert isinstance(stores, PostgresStores)
        async with stores.database.connection("the agent's reservations") as conn:
            cursor = await conn.execute("SELECT tokens FROM usage_reservations WHERE scope = 'agent:default'")
            held = sum(int(r[0]) for r in await cursor.fetchall())
        leased = 0  # the instances' open leases of the agent's scope (each held whole until it ends: the trade-off)
        for instance in instances:
            assert instance.gateway.turn_services.usage is not None
            for key, lease in instance.gateway.turn_services.usage.gate.leases._open.items():
                if any(c.scope.kind == "agent" for c in key.claims):
                    leased += lease.tokens
    assert held <= leased, (held, leased)
