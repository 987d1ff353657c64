"""Migration 30's budget check (`usage_reserve_set`, alone and riding in a session's claim) answers as migration 22's
(`usage_reserve_except`) did, and instances on either of them, running together, keep the one-reservation bound."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg

from agenthub.storage.usage import forgotten_tag
from tests.support.postgres import migrated

DAY, MONTH = "2026-12-05", "2026-12"
OLD = "SELECT o_scope, o_day, o_month, o_reserved FROM usage_reserve_except(%s, %s, %s, %s, %s, %s::text[])"
NEW = "SELECT o_scope, o_day, o_month, o_reserved FROM usage_reserve_set(%s, %s, %s, %s, %s, %s::text[])"


def _claims(*claims: tuple[str, str, str, int, int]) -> str:
    """(kind, channel, ident, day limit, month limit) each, in key order, as the usage store sends them."""
    made = [
        {
            "kind": kind,
            "channel": channel,
            "ident": ident,
            "key": f"agent:{ident}" if kind == "agent" else f"{kind}:{channel}:{ident}",
            "day": day,
            "month": month,
        }
        for kind, channel, ident, day, month in claims
    ]
    return json.dumps(sorted(made, key=lambda c: str(c["key"])))


async def _seed(conn: psycopg.AsyncConnection[Any]) -> None:
    """Alice used 3,000 today and 9,000 this month (a third of each under her forget tag: a forget before today's
    check left her earlier rows there), a running turn of hers holds 500, one settled turn (`done`) still 700."""
    tag = f"user:wecom:{forgotten_tag('wecom', 'alice')}"
    totals = [("user:wecom:alice", DAY, 2000), ("user:wecom:alice", MONTH, 6000), (tag, DAY, 1000), (tag, MONTH, 3000)]
    totals += [("agent:default", DAY, 50_000), ("agent:default", MONTH, 400_000), ("chat:wecom:room", MONTH, 10)]
    for scope, period, tokens in totals:
        await conn.execute(
            "INSERT INTO usage_totals (scope, period, tokens) VALUES (%s, %s, %s)", (scope, period, tokens)
        )
    for rid, scope, tokens in (("running", "user:wecom:alice", 500), ("done", "user:wecom:alice", 700)):
        await conn.execute(
            "INSERT INTO usage_reservations (id, scope, tokens, expires_at) "
            "VALUES (%s, %s, %s, now() + interval '1 hour')",
            (rid, scope, tokens),
        )
    await conn.execute(
        "INSERT INTO usage_reservations (id, scope, tokens, expires_at) "
        "VALUES ('lapsed', 'user:wecom:alice', 100000, now() - interval '1 second')"
    )


CASES = [  # (claims, ignore)
    (_claims(("user", "wecom", "alice", 10**6, 10**7)), []),
    (_claims(("user", "wecom", "alice", 10**6, 10**7)), ["done"]),
    (_claims(("user", "wecom", "alice", 4200, 0)), []),  # 3,000 + 1,200 held: at the day limit
    (_claims(("user", "wecom", "alice", 4200, 0)), ["done"]),  # 3,500: under it
    (_claims(("user", "wecom", "alice", 0, 10_200)), []),  # the month limit reached
    (_claims(("user", "wecom", "alice", 0, 0), ("chat", "wecom", "room", 0, 10), ("agent", "", "default", 0, 0)), []),
    (_claims(("user", "wecom", "bob", 1, 1), ("chat", "wecom", "bob", 1, 0), ("agent", "", "default", 0, 10**6)), []),
    (_claims(("agent", "", "default", 0, 400_000), ("user", "wecom", "alice", 10**6, 0)), []),
    (_claims(("agent", "", "default", 50_000, 0)), []),
]


async def test_the_new_check_answers_and_reserves_as_the_old_one(postgres_dsn: str) -> None:
    migrated(postgres_dsn)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await _seed(conn)
        answers: dict[str, list[Any]] = {"old": [], "new": []}
        for n, (claims, ignore) in enumerate(CASES):
            for name, sql in (("old", OLD), ("new", NEW)):
                async with conn.transaction(force_rollback=True):  # each check against the same seeded store
                    rows = await (await conn.execute(sql, (f"{name}{n}", claims, DAY, 1000, 60.0, ignore))).fetchall()
                    held = await conn.execute(
                        "SELECT scope, tokens FROM usage_reservations WHERE id = %s", (f"{name}{n}",)
                    )
                    reserved = sorted(await held.fetchall())
                made = all(row[3] for row in rows)
                answers[name].append(([row[:3] for row in rows], made, reserved))
        assert answers["new"] == answers["old"]
        assert [made for _, made, _ in answers["new"]] == [
            True,
            True,
            False,
            True,
            False,
            False,
            True,
            False,
            False,
        ]  # what the limits say
        assert answers["new"][0][0] == [("user:wecom:alice", 4200, 10200)]  # the tag's rows and both held counted


async def test_the_riding_claim_reserves_only_when_the_lease_is_granted(postgres_dsn: str) -> None:
    migrated(postgres_dsn)
    riding = (
        "SELECT o_token, o_scope, o_reserved FROM agenthub_session_claim_reserve_set("
        "%s, %s, 15.0, 'default', 'wecom', 'room', NULL, 0, %s, %s, %s, 1000, 60.0, ARRAY[]::text[])"
    )
    claims = _claims(("user", "wecom", "alice", 10**6, 0))
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        rows = await (await conn.execute(riding, ("session:room", "one", "r1", claims, DAY))).fetchall()
        assert rows[0][0] == 1 and rows[-1][1:] == ("user:wecom:alice", True)
        refused = await (await conn.execute(riding, ("session:room", "two", "r2", claims, DAY))).fetchall()
        assert all(row[1] is None for row in refused)  # held by `one`: no reservation rides
        held = await conn.execute("SELECT id FROM usage_reservations ORDER BY id")
        assert await held.fetchall() == [("r1",)]


async def test_instances_on_the_old_and_the_new_check_together_overspend_at_most_one_reservation(
    postgres_dsn: str,
) -> None:
    """32 turns of one person at once, half through each function (an upgrade under way): the limit 10,000 a day,
    1,000 reserved a turn, so exactly 10 are admitted (one more would reserve past the limit by a whole turn)."""
    migrated(postgres_dsn)
    claims = _claims(("user", "wecom", "carol", 10_000, 0))
    conns = [await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) for _ in range(32)]
    try:

        async def reserve(n: int) -> bool:
            sql = NEW if n % 2 else OLD
            rows = await (await conns[n].execute(sql, (f"turn{n}", claims, DAY, 1000, 60.0, []))).fetchall()
            return all(row[3] for row in rows)

        admitted = await asyncio.gather(*(reserve(n) for n in range(32)))
        assert sum(admitted) == 10
        held = await conns[0].execute("SELECT sum(tokens) FROM usage_reservations WHERE scope = 'user:wecom:carol'")
        assert await held.fetchone() == (10_000,)
    finally:
        for conn in conns:
            await conn.close()
