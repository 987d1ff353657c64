"""The batched statements' rows as one JSON parameter (appends, let-gos, inbox accepts): what JSON escapes or could
round (a NUL, a typed `\\u0000`, U+2028, non-BMP text, a megabyte, tokens and numbers beyond 2^53) arrive exact."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agenthub.session_keys import session_key
from agenthub.storage.lease import Lease
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import PostgresInbox, PostgresSessionStore
from agenthub.storage.postgres.database import Database
from agenthub.storage.store import FencedWriteError

TEXTS = [
    "nul \x00 inside",
    "typed \\u0000 and \\ud800 and \\\\u0041",
    "separators \u2028 \u2029, bom \ufeff, del \x7f, c1 \x85",
    "non-BMP \U0001f600 \U00010000 \U0010ffff 𠜎",
    "controls \x01 \x1f \x08 \x0c \r",
    "页" * 350_000,  # a megabyte in UTF-8
]
BIG = 2**62  # tokens from here on differ only beyond a double's 53 bits


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1}


async def test_records_and_metas_of_a_batch_of_appends_arrive_exact(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    keys = [session_key("default", "http", f"j{n}") for n in range(4)]
    numbers = {"role": "user", "content": "n", "timestamp": 2**63 - 1, "big": -(2**70), "f": 0.1, "e": 1e300}
    meta = SessionMeta(keys[0].chat_id, title=TEXTS[0] + TEXTS[2], created_at=2**53 + 1, updated_at=BIG + 5)
    await a.fence(keys[0], 1)  # the meta is written behind, with its append
    await a.write_meta(keys[0], meta, durable=False)
    many = [msg(str(i)) for i in range(1000)]
    await asyncio.gather(
        *(a.append(k, [msg(f"{n}:{t}") for t in TEXTS]) for n, k in enumerate(keys[:2])),
        a.append(keys[2], many),
        a.append(keys[3], [numbers]),
    )
    for n, k in enumerate(keys[:2]):
        assert [r["content"] for r in await b.load(k)] == [f"{n}:{t}" for t in TEXTS]
    assert await b.load(keys[2]) == many
    assert await b.load(keys[3]) == [numbers]
    assert await b.read_meta(keys[0]) == meta


@pytest.mark.parametrize("newer", [0, 1])
async def test_a_fencing_token_beyond_2_53_is_compared_exactly(pg_two: list[PostgresSessionStore], newer: int) -> None:
    """Tokens BIG + 2 and BIG + 3 are one double: rounded, `a`'s append would pass a fence one newer than its token."""
    a, b = pg_two
    fenced, other = session_key("default", "http", "fenced"), session_key("default", "http", "other")
    await a.fence(fenced, BIG + 2)
    await b.fence(fenced, BIG + 2 + newer)
    await a.fence(other, BIG + 3)
    results = await asyncio.gather(a.append(fenced, [msg("a")]), a.append(other, [msg("b")]), return_exceptions=True)
    assert isinstance(results[0], FencedWriteError) if newer else results[0] is None
    assert results[1] is None
    assert len(await b.load(fenced)) == 1 - newer and len(await b.load(other)) == 1


async def test_let_gos_with_tokens_beyond_2_53_release_their_leases_and_write_their_metas_exact(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    keys = [session_key("default", "http", f"g{n}") for n in range(3)]
    async with a.database.connection("leases lapsed at tokens beyond 2^53") as conn:
        for k in keys:
            await conn.execute(
                "INSERT INTO leases (name, holder, token, expires_at) VALUES (%s, 'z', %s, now() - interval '1 hour')",
                (f"session:{k}", BIG + 1),
            )
    leases = []
    for n, k in enumerate(keys):
        granted = await a.claim(k, f"session:{k}", "a", 30.0)
        assert granted is not None and granted.token == BIG + 2 and not granted.fenced_out
        leases.append(Lease(f"session:{k}", "a", granted.token, 0.0))
        usage = {"input_tokens": BIG + n, "output_tokens": 2**53 + 1}
        meta = SessionMeta(k.chat_id, title=TEXTS[n], created_at=2**53 + 1, updated_at=BIG + n, last_usage=usage)
        await a.write_meta(k, meta, durable=False)
    await asyncio.gather(*(a.let_go(k, lease) for k, lease in zip(keys, leases, strict=True)))
    async with b.database.connection("count") as conn:
        cursor = await conn.execute("SELECT count(*) FROM leases WHERE expires_at > now()")
        assert await cursor.fetchone() == (0,)
    for n, k in enumerate(keys):
        read = await b.read_meta(k)
        assert read is not None and (read.title, read.updated_at) == (TEXTS[n], BIG + n)
        assert read.last_usage == {"input_tokens": BIG + n, "output_tokens": 2**53 + 1}


async def test_inbox_entries_accepted_together_arrive_exact(database: Database) -> None:
    a = PostgresInbox(database, owner="a")
    payloads: list[dict[str, Any]] = [
        {"text": t, "n": 2**64 + 7, "neg": -(2**70), "f": 0.1, "yes": True, "none": None} for t in TEXTS
    ]
    payloads.append({"lone": "\ud800"})
    sessions = [None if n % 2 else f"default:http:i{n}" for n in range(len(payloads))]
    accepted = await asyncio.gather(
        *(a.accept(f"src{n} \u2028 😀", p, session=s) for n, (p, s) in enumerate(zip(payloads, sessions, strict=True)))
    )
    stored = await PostgresInbox(database, owner="a").unsettled()
    assert [(e.id, e.source, e.payload, e.session) for e in stored] == [
        (e.id, f"src{n} \u2028 😀", p, s) for n, (e, p, s) in enumerate(zip(accepted, payloads, sessions, strict=True))
    ]
