"""The IdempotencyStore contract on every backend's `Stores`: a key is taken once, keeps its request's reply, and a
refused request's key is free again."""

from __future__ import annotations

from agenthub.storage.stores import Stores


async def test_a_taken_key_answers_with_its_request_and_final_reply(backend_stores: Stores) -> None:
    keys = backend_stores.idempotency(3600.0)
    assert await keys.claim("alice", "k1", "fp-1") is None
    taken = await keys.claim("alice", "k1", "fp-2")
    assert taken is not None and taken.fingerprint == "fp-1"
    assert await keys.claim("bob", "k1", "fp-3") is None  # another scope is another key
    await keys.accepted("alice", "k1")
    await keys.finish("alice", "k1", {"type": "done", "text": "好"})
    record = await keys.get("alice", "k1")
    assert record is not None and record.accepted and record.final == {"type": "done", "text": "好"}


async def test_a_released_key_is_free_for_a_retry(backend_stores: Stores) -> None:
    keys = backend_stores.idempotency(3600.0)
    assert await keys.claim("alice", "k2", "fp") is None
    await keys.release("alice", "k2")
    assert await keys.get("alice", "k2") is None
    assert await keys.claim("alice", "k2", "fp") is None
