"""`Idempotency-Key` on chat requests (design §12): a retry with the same key joins the running turn or gets its
stored answer (one model call), also after a restart (files) and through another instance (PostgreSQL); the same key
with another body is a 422; keys are scoped per token, agent and chat."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agenthub.config import Settings
from agenthub.storage.tokens import TokenStore
from tests.support.fakes.anthropic import FakeAnthropic, http_error, reply_text
from tests.support.harness import RunningApi, running_api
from tests.support.http import AGENT, assert_error
from tests.support.roots import make_settings

CHAT = AGENT + "/chat"
LIVENESS_S = 30.0
"""A bound on the first model call of a process (it loads the SDK), not a measurement."""


def _keyed(key: str, **extra: str) -> dict[str, Any]:
    return {"headers": {"Idempotency-Key": key, **extra}}


async def test_a_retry_while_the_first_runs_joins_it_and_one_after_gets_the_stored_answer(
    api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("the one answer", hold=release))
    body = {"chat_id": "k1", "content": "charge me once"}
    first = asyncio.create_task(api.call("POST", CHAT, json=body, **_keyed("key-1")))
    await fake_llm.wait_for_requests(1, timeout_s=LIVENESS_S)
    retry = asyncio.create_task(api.call("POST", CHAT, json=body, **_keyed("key-1")))
    streamed = asyncio.create_task(api.call("POST", CHAT + "?stream=1", json=body, **_keyed("key-1")))
    await asyncio.sleep(0.3)  # both retries are waiting for the first one now
    assert not retry.done() and not streamed.done()
    release.set()
    (status, answer), (retry_status, retried) = await first, await retry
    assert status == 200 and answer["reply"] == "the one answer"
    assert retry_status == 200 and retried["reply"] == "the one answer"
    stream_status, frames = await streamed
    assert stream_status == 200 and "the one answer" in frames and "event: done" in frames

    status, later = await api.call("POST", CHAT, json=body, **_keyed("key-1"))
    assert status == 200 and later["reply"] == "the one answer"
    assert len(fake_llm.message_requests()) == 1
    status, history = await api.call("GET", AGENT + "/sessions/k1/messages")
    assert [m["content"] for m in history["messages"] if m["role"] == "user"] == ["charge me once"]


async def test_the_same_key_with_another_body_is_a_422_and_keys_are_per_chat(
    api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("first"), reply_text("other chat"))
    status, _ = await api.call("POST", CHAT, json={"chat_id": "k2", "content": "one"}, **_keyed("k"))
    assert status == 200
    status, body = await api.call("POST", CHAT, json={"chat_id": "k2", "content": "two"}, **_keyed("k"))
    assert status == 422
    assert_error(body, "idempotency_key_reused")
    status, body = await api.call("POST", CHAT, json={"chat_id": "k3", "content": "two"}, **_keyed("k"))
    assert status == 200 and body["reply"] == "other chat"  # another chat: another scope
    status, body = await api.call("POST", CHAT, json={"chat_id": "k2", "content": "x"}, **_keyed("bad key"))
    assert status == 400
    assert_error(body, "invalid_idempotency_key")
    assert len(fake_llm.message_requests()) == 2


async def test_a_failed_turn_frees_its_key_for_a_retry(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(http_error(400, "refused"), reply_text("second try"))
    body = {"chat_id": "k4", "content": "again"}
    status, _ = await api.call("POST", CHAT, json=body, **_keyed("k4"))
    assert status != 200
    status, answer = await api.call("POST", CHAT, json=body, **_keyed("k4"))
    assert status == 200 and answer["reply"] == "second try"


async def test_the_answer_to_a_key_survives_a_restart(settings: Settings, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("kept on disk"))
    body = {"chat_id": "k5", "content": "remember"}
    async with running_api(settings) as first:
        status, answer = await first.call("POST", CHAT, json=body, **_keyed("k5"))
        assert status == 200 and answer["reply"] == "kept on disk"
    TokenStore(settings.auth_dir).revoke("test")  # the next start makes a new one of the same name: the same scope
    async with running_api(settings) as second:
        status, answer = await second.call("POST", CHAT, json=body, **_keyed("k5"))
        assert status == 200 and answer["reply"] == "kept on disk"
    assert len(fake_llm.message_requests()) == 1


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_retry_through_another_instance_joins_and_gets_the_same_answer(
    tmp_path: Path, postgres_dsn: str, fake_llm: FakeAnthropic
) -> None:
    def instance(name: str) -> Settings:  # two hosts: each its own directories, one database
        return make_settings(tmp_path / name, fake_llm.base_url, store={"backend": "postgres", "dsn": postgres_dsn})

    async with running_api(instance("a")) as a, running_api(instance("b")) as b:
        stores = a.server.stores
        assert stores is not None and stores.tokens is not None
        client = _auth(await stores.tokens.create("client"))  # one client, one token, either instance
        release = asyncio.Event()
        fake_llm.script(reply_text("answered on a", hold=release))
        body = {"chat_id": "k6", "content": "once across instances"}
        first = asyncio.create_task(a.call("POST", CHAT, json=body, headers={"Idempotency-Key": "m1", **client}))
        await fake_llm.wait_for_requests(1, timeout_s=LIVENESS_S)
        retry = asyncio.create_task(b.call("POST", CHAT, json=body, headers={"Idempotency-Key": "m1", **client}))
        await asyncio.sleep(0.3)
        assert not retry.done()
        release.set()
        assert (await first)[1]["reply"] == "answered on a"
        status, retried = await retry
        assert status == 200 and retried["reply"] == "answered on a"
        status, later = await b.call("POST", CHAT, json=body, headers={"Idempotency-Key": "m1", **client})
        assert status == 200 and later["reply"] == "answered on a"
        assert len(fake_llm.message_requests()) == 1


async def test_an_answer_holding_a_lone_surrogate_is_kept_for_a_retry(
    backend_settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """Half a UTF-16 pair (the model's JSON may escape one) cannot be UTF-8: the answer holds U+FFFD in its place
    (`llm.reply`), and a retry gets that same stored answer (the store's own escape of one: tests/storage)."""
    fake_llm.script(reply_text("half a pair \ud800 kept"))
    body = {"chat_id": "k7", "content": "odd text"}
    async with running_api(backend_settings) as api:
        status, answer = await api.call("POST", CHAT, json=body, **_keyed("k7"))
        assert status == 200 and answer["reply"] == "half a pair \ufffd kept"
        status, retried = await api.call("POST", CHAT, json=body, **_keyed("k7"))
        assert status == 200 and retried["reply"] == "half a pair \ufffd kept"
    assert len(fake_llm.message_requests()) == 1
