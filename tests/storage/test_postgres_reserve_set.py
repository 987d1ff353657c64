"""Migration 28's budget check (`usage_reserve_set`, alone and riding in a session's claim) answers as migration 22's
(`usage_reserve_except`) did, and instances on either of them, running together, keep the one-reservation bound."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import psycopg

from agenthub.storage.postgres.database import open_database
from agenthub.storage.postgres.usage import PostgresUsageStore
from agenthub.storage.usage import Claim, Scope, forgotten_tag
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


ODD_IDENTS = ['a"b', "a\\b", "a\nb", "王小明😀", "a\tb\x01c", "a\\u0041", "o'brien;--", "\u2028x"]
"""Ids the claims' JSON escapes (`PostgresUsageStore.ride` writes them): read as typed rows (the new function) they
must name the same scopes, budget locks and forget tags as `->>` did (the old one)."""


async def test_ids_the_claims_json_escapes_name_the_same_scopes_locks_and_forget_tags_in_both(
    postgres_dsn: str,
) -> None:
    migrated(postgres_dsn)
    database = await open_database(postgres_dsn)
    store = PostgresUsageStore(database)
    try:
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
            for ident in ODD_IDENTS:
                channel = f"ch{ident}"
                for kind in ("user", "chat"):  # 7 of its own and 5 under its forget tag, today and this month
                    own, tag = f"{kind}:{channel}:{ident}", f"{kind}:{channel}:{forgotten_tag(channel, ident)}"
                    for scope, tokens in ((own, 7), (tag, 5)):
                        await conn.execute(
                            "INSERT INTO usage_totals (scope, period, tokens) VALUES (%s, %s, %s), (%s, %s, %s)",
                            (scope, DAY, tokens, scope, MONTH, tokens * 10),
                        )
                claims = [
                    Claim(Scope("user", channel, ident), 100, 0),
                    Claim(Scope("chat", channel, ident), 0, 1000),
                    Claim(Scope("agent", "", ident)),
                ]
                seen = {}
                for name, sql in (("old", OLD), ("new", NEW)):
                    ride = store.ride(claims, DAY, 10, 60.0)
                    async with conn.transaction(force_rollback=True):
                        rows = await (await conn.execute(sql, ride.params)).fetchall()
                        held = await conn.execute("SELECT scope FROM usage_reservations WHERE id = %s", (ride.id,))
                        locks = await conn.execute(
                            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                        )
                        seen[name] = (rows, sorted(await held.fetchall()), sorted(await locks.fetchall()))
                assert seen["new"] == seen["old"], ident
                rows = seen["new"][0]
                assert [r[1:] for r in rows if not r[0].startswith("agent:")] == [(12, 120, True)] * 2, ident
                assert len(seen["new"][1]) == len(seen["new"][2]) == 3, ident
    finally:
        await database.close()


SCOPES = {
    "a": ("user", "wecom", "alice", 7000, 0),
    "b": ("chat", "wecom", "room", 0, 9000),
    "c": ("agent", "", "x", 11_000, 0),
}


async def test_old_and_new_checks_of_overlapping_scopes_together_never_deadlock_and_keep_every_bound(
    postgres_dsn: str,
) -> None:
    """24 connections, 40 checks each, of overlapping scope sets, each check through either function at random:
    both take the budget locks in the claims' (key) order, so none waits in a circle (a deadlock would fail a
    check), and no scope's reservations pass its limit (1,000 a turn); each then fills exactly to it alone."""
    migrated(postgres_dsn)
    sets = [["a", "b"], ["b", "c"], ["a", "c"], ["a", "b", "c"], ["c"]]
    rnd = random.Random(30)
    conns = [await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) for _ in range(24)]
    try:

        async def checks(n: int) -> None:
            for m in range(40):
                claims = _claims(*(SCOPES[s] for s in rnd.choice(sets)))
                await conns[n].execute(rnd.choice((OLD, NEW)), (f"t{n}-{m}", claims, DAY, 1000, 60.0, []))

        async with asyncio.timeout(120):
            await asyncio.gather(*(checks(n) for n in range(24)))
        limits = {"user:wecom:alice": 7000, "chat:wecom:room": 9000, "agent:x": 11_000}
        held = await conns[0].execute("SELECT scope, sum(tokens)::bigint FROM usage_reservations GROUP BY scope")
        together: dict[str, int] = dict(await held.fetchall())
        assert all(together[scope] <= limit for scope, limit in limits.items()), together
        for name, scope in SCOPES.items():  # a scope only ever checked with a full one stays short: fill each alone
            for m in range(12):
                await conns[0].execute(NEW, (f"top-{name}-{m}", _claims(scope), DAY, 1000, 60.0, []))
        held = await conns[0].execute("SELECT scope, sum(tokens)::bigint FROM usage_reservations GROUP BY scope")
        assert dict(await held.fetchall()) == limits
    finally:
        for conn in conns:
            await conn.close()


async def test_the_riding_claims_old_and_new_answer_alike_when_free_held_by_another_fenced_out_or_already_ours(
    postgres_dsn: str,
) -> None:
    migrated(postgres_dsn)
    claims = _claims(("user", "wecom", "alice", 10**6, 0))
    before = {
        "free": [],
        "another's": ["INSERT INTO leases (name, holder, token, expires_at) VALUES ('s', 'x', 5, now() + '1h')"],
        "fenced out": ["INSERT INTO session_fences VALUES ('default', 'wecom', 'room', 99)"],
        "ours": [
            "INSERT INTO leases (name, holder, token, expires_at) VALUES ('s', 'me', 5, now() + '1h')",
            "INSERT INTO session_fences VALUES ('default', 'wecom', 'room', 5)",
        ],
    }
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        for case, statements in before.items():
            seen = {}
            for function in ("agenthub_session_claim_reserving", "agenthub_session_claim_reserve_set"):
                async with conn.transaction(force_rollback=True):
                    for statement in statements:
                        await conn.execute(statement)
                    riding = (
                        f"SELECT o_token, o_fence, o_scope, o_day, o_month, o_reserved FROM {function}('s', 'me', "
                        "15.0, 'default', 'wecom', 'room', NULL, 0, 'r', %s, %s, 1000, 60.0, ARRAY[]::text[])"
                    )
                    rows = await (await conn.execute(riding, (claims, DAY))).fetchall()
                    held = await (await conn.execute("SELECT count(*) FROM usage_reservations")).fetchone()
                seen[function] = (rows, held)
            old, new = seen.values()
            assert new == old, case
            assert new[1] == ((1,) if case in ("free", "ours") else (0,)), case
