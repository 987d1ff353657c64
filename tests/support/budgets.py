"""Budget tests' helpers: what a turn's fake model call uses, and waiting for concurrent turns at the edge."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pytest

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.gateway.handle import ReplyHandle
from agenthub.hosting.app import open_stores
from agenthub.messages import ReplyEvent
from agenthub.storage.ports import RidingReserves, UsageStore
from agenthub.storage.postgres.database import Database
from agenthub.storage.stores import Stores
from agenthub.storage.usage import Claim, ClaimRide, Reservation, Scope
from agenthub.usage.report import totals
from tests.support.fakes.anthropic import FakeAnthropic

PER_CALL = {"input_tokens": 100, "output_tokens": 50}
MAX_TOKENS = 200


def postgres_budgets(settings_factory: Callable[..., Settings], dsn: str, **budgets: object) -> Settings:
    """Settings on PostgreSQL at `dsn` with `budgets` and MAX_TOKENS as the reply's room."""
    return settings_factory(budgets=budgets, llm={"max_tokens": MAX_TOKENS}, store={"backend": "postgres", "dsn": dsn})


async def count_rows(database: Database, sql: str, *params: object) -> int:
    """The one number `sql` (a count) answers."""
    async with database.connection("test count") as conn:
        row = await (await conn.execute(sql, params)).fetchone()
    assert row is not None
    return int(row[0])


async def used_by(gw: GatewayCore, sender: str, channel: str = "wecom") -> int:
    """The sender's tokens in the store, once every settlement and call so far is written."""
    assert gw.turn_services.usage is not None
    await gw.turn_services.usage.gate.drain()
    await gw.turn_services.usage.recorder.flush()
    rows = await gw.turn_services.usage.store.days("2000-01-01", "2100-01-01")
    return totals(rows, Scope("user", channel, sender), "2000-01-01", {}).tokens


async def settle_all(
    handles: list[ReplyHandle], fake: FakeAnthropic, hold: asyncio.Event, *, timeout_s: float = 20
) -> list[ReplyEvent]:
    """Wait until every turn is refused or waiting at the fake model, then let the model answer them together."""
    results: list[asyncio.Task[Any]] = [asyncio.create_task(h.result()) for h in handles]
    async with asyncio.timeout(timeout_s):
        while sum(t.done() for t in results) + fake.in_flight < len(handles):  # noqa: ASYNC110 (two sources)
            await asyncio.sleep(0.01)
    hold.set()
    return list(await asyncio.gather(*results))


def store_of(backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
    return {"backend": "postgres", "dsn": request.getfixturevalue("postgres_dsn")} if backend == "postgres" else {}


class CountedReserves:
    """The store the gateway uses, with its `reserve` calls counted (the round trips a check costs), and the checks
    that ride in a session's claim instead (PostgreSQL: `rides`, no round trip of their own)."""

    def __init__(self, store: UsageStore) -> None:
        self.store = store
        self.reserves = 0
        self.rides = 0
        self.asked_days: list[str] = []
        """The day of every call (reserve or ride), in order."""

    def ride(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> ClaimRide:
        assert isinstance(self.store, RidingReserves)
        self.rides += 1
        self.asked_days.append(day)
        return self.store.ride(claims, day, tokens, ttl_s, ignore=ignore)

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def reserve(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> Reservation:
        self.reserves += 1
        self.asked_days.append(day)
        return await self.store.reserve(claims, day, tokens, ttl_s, ignore=ignore)


async def counted_stores(settings: Settings) -> tuple[Stores, CountedReserves]:
    stores = await open_stores(settings)
    counted = CountedReserves(stores.usage)
    stores.usage = counted  # type: ignore[assignment]  # the same store, its calls counted
    return stores, counted
