"""The HTTP API of two instances on one PostgreSQL (`[store] backend = "postgres"`): a session created, answered or
deleted through one is seen at once through the other (the existence check asks the database, never a stale
cache); a chat's inbox entry is settled by the statement that stores its answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agenthub.config import Settings
from agenthub.storage.postgres import PostgresInbox
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.harness import running_api
from tests.support.http import AGENT
from tests.support.roots import make_settings


async def test_two_instances_see_each_other_s_sessions_at_once(
    tmp_path: Path, postgres_dsn: str, fake_llm: FakeAnthropic
) -> None:
    def instance(name: str) -> Settings:  # two hosts: each its own directories, one database
        return make_settings(tmp_path / name, fake_llm.base_url, store={"backend": "postgres", "dsn": postgres_dsn})

    async with running_api(instance("a")) as a, running_api(instance("b")) as b:
        status, _ = await a.call("POST", AGENT + "/sessions", json={"chat_id": "s1", "title": "共享"})
        assert status == 201
        assert (await b.call("POST", AGENT + "/sessions", json={"chat_id": "s1"}))[0] == 409
        fake_llm.script(reply_text("来自 A 的回答"))
        status, body = await a.call("POST", AGENT + "/chat", json={"chat_id": "s1", "content": "你好"})
        assert status == 200 and body["reply"] == "来自 A 的回答"
        status, body = await b.call("GET", AGENT + "/sessions/s1/messages")
        assert status == 200
        messages = [(m["role"], m["content"]) for m in body["messages"]]
        assert messages == [("user", "你好"), ("assistant", "来自 A 的回答")]
        assert (await b.call("DELETE", AGENT + "/sessions/s1"))[0] == 204
        missing: tuple[int, Any] = await a.call("GET", AGENT + "/sessions/s1/messages")
        assert missing[0] == 404  # A held s1 in its cache: the database's answer wins


async def test_a_token_made_on_one_instance_opens_the_other_and_its_revocation_closes_both(
    tmp_path: Path, postgres_dsn: str, fake_llm: FakeAnthropic
) -> None:
    def instance(name: str) -> Settings:
        return make_settings(tmp_path / name, fake_llm.base_url, store={"backend": "postgres", "dsn": postgres_dsn})

    async with running_api(instance("a")) as a, running_api(instance("b")) as b:
        stores = a.server.stores
        assert stores is not None and stores.tokens is not None
        ci = await stores.tokens.create("ci")
        for instance_ in (a, b):
            status, _ = await instance_.call("GET", "/api/agents", headers={"Authorization": f"Bearer {ci}"})
            assert status == 200
        assert await stores.tokens.revoke("ci")
        for instance_ in (a, b):
            status, _ = await instance_.call("GET", "/api/agents", headers={"Authorization": f"Bearer {ci}"})
            assert status == 401


async def _inbox_empty(inbox: PostgresInbox) -> None:
    for _ in range(200):
        if await inbox.count() == 0:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("entries left unsettled")


async def test_a_chat_is_settled_by_the_append_of_its_answer_and_a_keyed_one_once_its_key_keeps_the_answer(
    tmp_path: Path, postgres_dsn: str, fake_llm: FakeAnthropic
) -> None:
    settings = make_settings(tmp_path / "a", fake_llm.base_url, store={"backend": "postgres", "dsn": postgres_dsn})
    async with running_api(settings) as api:
        inbox = api.gateway.turn_services.inbox
        assert isinstance(inbox, PostgresInbox)
        fake_llm.script(*(reply_text(f"回答 {n}") for n in range(4)))
        for n in range(3):
            status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": f"e{n}", "content": "你好"})
            assert status == 200 and body["reply"] == f"回答 {n}"
        await _inbox_empty(inbox)
        assert inbox.settle_statements == 0  # answered once stored: settled in the statement that stored it
        keyed = {"json": {"chat_id": "e9", "content": "once"}, "headers": {"Idempotency-Key": "k1"}}
        status, body = await api.call("POST", AGENT + "/chat", **keyed)
        assert status == 200 and body["reply"] == "回答 3"
        await _inbox_empty(inbox)
        assert inbox.settle_statements == 1  # after its key kept the answer
        keyed = {"json": {"chat_id": "e9", "content": "once"}, "headers": {"Idempotency-Key": "k1"}}
        status, body = await api.call("POST", AGENT + "/chat", **keyed)
        assert status == 200 and body["reply"] == "回答 3"
        assert len(fake_llm.message_requests()) == 4
