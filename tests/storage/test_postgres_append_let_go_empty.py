"""A riding append with no records: no statement rides, the meta change is written the usual way."""

from __future__ import annotations

import pytest

from agenthub.session.history import SessionHistory
from agenthub.session_keys import session_key
from agenthub.storage.lease import LetGoRide
from agenthub.storage.postgres import PostgresSessionStore
from tests.support.leases import claimed


@pytest.mark.parametrize("rides", [False, True])
async def test_a_riding_append_without_records_keeps_its_meta_change(
    pg_two: list[PostgresSessionStore], rides: bool
) -> None:
    a, b = pg_two
    k = session_key("default", "http", f"ride-empty-{rides}")
    lease = await claimed(a, k, "a", 30.0)
    assert lease is not None
    history = SessionHistory(store=a)
    history.lease_held(k, True)
    await history.append(k, {"role": "user", "content": "q"})
    settled: list[bool] = []
    await history.append(
        k, meta_changes={"last_usage": {"input_tokens": 7}}, let_go=LetGoRide(lease, settled.append) if rides else None
    )
    assert settled == ([False] if rides else [])
    await history.flush(k)  # what the usual release does (the ride was not released), then its let-go
    history.lease_held(k, False)
    await a.let_go(k, lease)
    stored = await b.read_meta(k)
    assert stored is not None and stored.last_usage == {"input_tokens": 7}, stored
