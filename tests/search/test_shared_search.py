"""memory_search on PostgreSQL: one index in the database for every instance (what one stores the others find at
once), the memory scope kept, 32 writers while searching, delete and "forget me" leaving nothing of the text in the
index tables, and a database that is away told to the model as a tool error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agenthub.agent.tools import ToolContext, run_tool
from agenthub.forget.redact import Person
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_services, gateway_forgetter, open_stores
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.search.api import UNAVAILABLE
from agenthub.search.shared import SharedSearchService
from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.search_index import SearchScope
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, reply_text, reply_tool
from tests.support.postgres import PostgresServer, rows_holding
from tests.support.roots import make_settings
from tests.support.shared_gateways import Instance, shared_instances

INDEX_TABLES = ("search_docs", "search_blocks", "search_sources", "search_terms", "search_names")


def _user(text: str, sender: str = "", ts: int | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"role": "user", "content": text}
    if sender:
        record["sender_id"] = sender
    if ts is not None:
        record["timestamp"] = ts
    return record


async def ask(
    gw: GatewayCore, query: str, *, channel: str, chat: str, sender: str = "me", agent: str = "default"
) -> tuple[str, bool]:
    """One memory_search call as the model makes it in that chat: (result text, is_error)."""
    definition = gw.agents.get(agent)
    ctx = ToolContext(
        agent=definition,
        key=SessionKey(agent, channel, chat),
        sender_id=sender,
        memory=gw.memory_files,
        workspace=gw.settings.workspace_dir / agent,
        search=gw.search,
    )
    return await run_tool(gw.tools.for_agent(definition), "memory_search", {"query": query, "limit": 10}, ctx)


async def index_rows_holding(dsn: str, text: str) -> int:
    """Rows of the index tables holding `text` in any column."""
    return await rows_holding(dsn, text, INDEX_TABLES)


@pytest.fixture
async def three(tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str) -> AsyncIterator[list[Instance]]:
    for n in range(3):
        agents = tmp_path / f"instance-{n}" / "agents"
        write_agent(agents, "team", {"memory": {"scope": "chat", "user_profile": "per_user"}})
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 3) as instances:
        yield instances


async def test_what_one_instance_stores_the_others_find_at_once(three: list[Instance], fake_llm: FakeAnthropic) -> None:
    one, two, three_ = (i.gateway for i in three)
    assert all(isinstance(gw.search, SharedSearchService) for gw in (one, two, three_))
    await one.history.append(SessionKey("default", "http", "desk"), _user("the launch code is CODE-7Q2 夜莺"))
    for gw in (two, three_):
        text, is_error = await ask(gw, "what is the launch code?", channel="cli", chat="elsewhere")
        assert not is_error and "CODE-7Q2" in text and "[session http:desk]" in text, text
    # and through a turn on the third instance, the model calling the tool
    fake_llm.script(reply_tool("memory_search", {"query": "夜莺"}), reply_text("found it"))
    events = [e async for e in await three_.submit(InboundMessage("http", "visitor", "me", "search please"))]
    assert isinstance(events[-1], DoneEvent)
    assert any("CODE-7Q2" in str(r.body) for r in fake_llm.message_requests()[-1:])


async def test_the_memory_scope_holds_on_postgres(three: list[Instance]) -> None:
    gw, other = three[0].gateway, three[1].gateway
    team = gw.agents.get("team")
    mine, theirs = SessionKey("team", "wecom", "group-b"), SessionKey("team", "wecom", "group-a")
    await gw.history.append(theirs, _user("群A的暗号是夜莺 secret alpha", "alice"))
    await gw.history.append(mine, _user("群B的暗号是孔雀 secret beta", "bob"))
    await gw.history.append(SessionKey("default", "wecom", "alice-private"), _user("我的银行卡密码是夜莺1234"))
    await gw.history.append(SessionKey("default", "cli", "desk"), _user("控制台记下的夜莺笔记"))
    files = gw.memory_files
    await files.store.write(files.memory_name(team, theirs), "- 群A的会议室在夜莺厅\n")
    await files.store.write(files.person_profile(team, mine, "bob", "group"), "- bob 喜欢乌龙茶 oolong\n")
    await files.store.write(files.person_profile(team, mine, "alice", "group"), "- alice 的生日 oolong\n")
    await files.store.write(MemoryName.agent_memory("default"), "- 用户的猫叫夜莺\n")

    # chat-scoped: only its own chat, and only the current sender's profile
    assert (await ask(other, "夜莺", channel="wecom", chat="group-b", sender="bob", agent="team"))[0] == (
        'no matches for "夜莺"'
    )
    beta, _ = await ask(other, "secret", channel="wecom", chat="group-b", sender="bob", agent="team")
    assert "secret beta" in beta and "alpha" not in beta
    bobs, _ = await ask(other, "oolong", channel="wecom", chat="group-b", sender="bob", agent="team")
    assert "bob 喜欢乌龙茶" in bobs and "alice" not in bobs
    # agent-scoped (CLI, HTTP under auto): every agent-scoped chat and the agent's memory, never a WeCom chat
    http, _ = await ask(other, "夜莺", channel="http", chat="visitor")
    assert "控制台记下的夜莺笔记" in http and "用户的猫叫夜莺" in http
    assert "银行卡" not in http and "群A" not in http
    # a WeCom chat of the default agent (chat-scoped under auto) sees none of them
    assert (await ask(other, "夜莺", channel="wecom", chat="bob-private"))[0] == 'no matches for "夜莺"'


async def test_32_writers_on_three_instances_while_searching_are_all_found(three: list[Instance]) -> None:
    gateways = [i.gateway for i in three]

    async def writer(n: int) -> None:
        gw = gateways[n % 3]
        key = SessionKey("default", "http", f"writer-{n}")
        for m in range(5):
            await gw.history.append(key, _user(f"note {m} of writer{n} token{n}x{m}"))

    searches = 0
    done = asyncio.Event()

    async def searcher() -> None:
        nonlocal searches
        while not done.is_set():
            text, is_error = await ask(gateways[2], "note of writer", channel="cli", chat="reader")
            assert not is_error, text
            searches += 1

    reading = asyncio.create_task(searcher())
    await asyncio.gather(*(writer(n) for n in range(32)))
    done.set()
    await reading
    assert searches > 0
    for n in range(0, 32, 3):
        found = await gateways[(n + 1) % 3].search.search(
            "default", f"token{n}x4", SearchScope(None, agent_scoped=lambda _: True), 5
        )
        assert [h.passage.text for h in found] == [f"note 4 of writer{n} token{n}x4"]
    stats = await gateways[0].search.stats("default")
    assert stats["docs"] == 32 * 5  # each message indexed exactly once, whoever caught it up


async def test_delete_and_forget_leave_nothing_of_the_text_in_the_index_tables(
    three: list[Instance], postgres_dsn: str
) -> None:
    gw = three[0].gateway
    team = gw.agents.get("team")
    gone, group = SessionKey("default", "http", "to-delete"), SessionKey("team", "wecom", "group-x")
    await gw.history.append(gone, _user("deleteme-sapphire is my pin"))
    await gw.history.append(group, _user("forgetme-ruby is where I live", "alice"), _user("hello all", "bob"))
    await gw.memory_files.store.write(
        gw.memory_files.person_profile(team, group, "alice", "group"), "- forgetme-opal\n"
    )
    assert "sapphire" in (await ask(three[1].gateway, "sapphire", channel="http", chat="x"))[0]
    assert "ruby" in (await ask(three[1].gateway, "ruby", channel="wecom", chat="group-x", agent="team"))[0]
    opal, _ = await ask(three[1].gateway, "opal", channel="wecom", chat="group-x", sender="alice", agent="team")
    assert "opal" in opal
    assert await index_rows_holding(postgres_dsn, "sapphire") > 0 and await index_rows_holding(postgres_dsn, "ruby") > 0
    assert isinstance(gw.search, SharedSearchService)
    for agent in ("default", "team"):  # their postings in blocks: the removals take them out of those too
        assert await gw.search.pack(agent) > 0

    await gw.history.delete(gone)  # what DELETE …/sessions/{chat_id} does, then its index hook
    await gw.search.purge("default", [gone])
    await gateway_forgetter(three[0].services).forget_in_chat(team, group, Person("wecom", "alice"))
    for text in ("sapphire", "ruby", "opal"):
        assert await index_rows_holding(postgres_dsn, text) == 0, text
    assert "hello all" in (await ask(three[2].gateway, "hello", channel="wecom", chat="group-x", agent="team"))[0]


async def test_a_database_that_is_away_is_a_tool_error_and_the_turn_goes_on(
    tmp_path: Path, fake_llm: FakeAnthropic, own_postgres_server: PostgresServer
) -> None:
    dsn = own_postgres_server.create_database()
    settings = make_settings(tmp_path, fake_llm.base_url, store={"backend": "postgres", "dsn": dsn})
    stores = await open_stores(settings)
    try:
        async with build_services(settings, stores=stores) as services:
            gw = services.gateway
            await gw.history.append(SessionKey("default", "http", "desk"), _user("nightingale"))
            assert "nightingale" in (await ask(gw, "nightingale", channel="http", chat="desk"))[0]
            own_postgres_server.stop()
            text, is_error = await ask(gw, "nightingale", channel="http", chat="desk")
            assert is_error and text == UNAVAILABLE
            own_postgres_server.start()
            text, is_error = await ask(gw, "nightingale", channel="http", chat="desk")
            assert not is_error and "nightingale" in text
    finally:
        await stores.aclose()
