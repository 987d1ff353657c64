"""`memory_search`: Chinese and English words over histories, archives and memory files, bound by the memory
scope, kept current on append/replace/delete, and surviving a restart (through the fake model and the real SDK)."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import sqlite3
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.search.service import SearchService
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from agenthub.storage import jsonl
from agenthub.storage.paths import AgentLayout
from agenthub.storage.search_files import index_path
from agenthub.storage.search_index import SearchScope
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, last_user_text, reply_text, reply_tool

PLANTED = "顺便说一下，我们的暗号是夜莺，the password is nightingale"
PLANTED_AT = 1_764_000_000_000  # ms


def _iso(ts_ms: int) -> str:
    return dt.datetime.fromtimestamp(ts_ms / 1000, tz=ZoneInfo("Asia/Shanghai")).isoformat(timespec="seconds")


def _tool_results(fake: FakeAnthropic) -> list[dict[str, Any]]:
    """Every tool_result block the model was sent, in order of the requests (each one once)."""
    seen: dict[str, dict[str, Any]] = {}
    for request in fake.message_requests():
        for message in (request.body or {}).get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result":
                    seen.setdefault(block["tool_use_id"], block)
    return list(seen.values())


def _text_of(result: dict[str, Any]) -> str:
    content = result["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


async def _search(
    gw: GatewayCore,
    fake: FakeAnthropic,
    *queries: dict[str, Any],
    channel: str = "cli",
    chat: str = "direct",
    sender: str = "me",
    agent: str | None = None,
) -> list[tuple[str, bool]]:
    """One turn in which the model calls memory_search once per query; the (result text, is_error) of each."""
    before = len(_tool_results(fake))
    fake.script(*(reply_tool("memory_search", q) for q in queries), reply_text("done"))
    events = [e async for e in await gw.submit(InboundMessage(channel, chat, sender, "search please", agent=agent))]
    assert isinstance(events[-1], DoneEvent), events[-1]
    results = _tool_results(fake)[before:]
    assert len(results) == len(queries)
    return [(_text_of(r), bool(r.get("is_error"))) for r in results]


def _user(text: str, ts: int | None = None) -> dict[str, Any]:
    return {"role": "user", "content": text, **({"timestamp": ts} if ts is not None else {})}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def _index_rows(settings: Settings, agent: str, session: SessionKey) -> list[tuple[int, str]]:
    return _index_rows_at(settings.data_dir, session, agent)


def _index_rows_at(data_dir: Path, session: SessionKey, agent: str = "default") -> list[tuple[int, str]]:
    db = sqlite3.connect(index_path(AgentLayout(data_dir, agent)))
    try:
        return db.execute(
            "SELECT d.id, d.text FROM docs d JOIN sources s ON s.id = d.source_id WHERE s.session = ? ORDER BY d.id",
            (str(session),),
        ).fetchall()
    finally:
        db.close()


async def test_finds_a_fact_planted_in_one_of_500_sessions_by_a_chinese_and_an_english_keyword(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    planted = SessionKey("default", "http", "chat-317")
    for i in range(500):
        key = SessionKey("default", "http", f"chat-{i}")
        filler = f"第{i}次会议讨论了预算和排期 meeting {i} about budget and schedule"
        await gateway.history.append(key, _user(filler), _assistant(f"好的，记下了第{i}条 noted {i}"))
        if key == planted:
            await gateway.history.append(key, _user(PLANTED, PLANTED_AT), _assistant("明白，我记住了"))

    found = await _search(
        gateway,
        fake_llm,
        {"query": "夜莺"},
        {"query": "暗号是夜莺"},
        {"query": "Nightingale"},
        {"query": "夜莺 password"},
    )
    for text, is_error in found:
        assert not is_error
        assert text.startswith('1 match for "'), text
        assert "[session http:chat-317] user " + _iso(PLANTED_AT) in text
        assert "暗号是夜莺" in text and "chat-316" not in text
    missing, _ = (await _search(gateway, fake_llm, {"query": "孔雀"}))[0]
    assert missing == 'no matches for "孔雀"'


async def test_a_chat_scoped_agent_never_returns_another_chats_text_nor_another_senders_profile(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "team", {"memory": {"scope": "chat", "user_profile": "per_user"}})
    async with build_gateway(settings) as gw:
        mine, theirs = SessionKey("team", "wecom", "group-b"), SessionKey("team", "wecom", "group-a")
        await gw.history.append(theirs, _user("群A的暗号是夜莺 secret alpha"), _assistant("群A收到 alpha"))
        await gw.history.append(mine, _user("群B的暗号是孔雀 secret beta"), _assistant("群B收到 beta"))
        agent = gw.agents.get("team")
        files = gw.memory_files
        await files.store.write(files.memory_name(agent, theirs), "- 群A的会议室在夜莺厅\n")
        own_profile = files.person_profile(agent, mine, "bob", "group")  # these chats carry no chat_type
        await files.store.write(own_profile, "- bob 喜欢乌龙茶 oolong\n")
        await files.store.write(files.person_profile(agent, mine, "alice", "group"), "- alice 的生日是夜莺节 oolong\n")

        ((alices, _),) = await _search(
            gw, fake_llm, {"query": "oolong"}, channel="wecom", chat="group-b", sender="alice", agent="team"
        )
        assert "alice 的生日" in alices and "bob" not in alices
        results = await _search(
            gw,
            fake_llm,
            {"query": "夜莺"},
            {"query": "alpha"},
            {"query": "暗号"},
            {"query": "secret", "limit": 10},
            {"query": "oolong"},
            channel="wecom",
            chat="group-b",
            sender="bob",
            agent="team",
        )
    texts = [text for text, _ in results]
    assert texts[0] == 'no matches for "夜莺"'
    assert texts[1] == 'no matches for "alpha"'
    assert "[session wecom:group-b] user" in texts[2] and "群B的暗号是孔雀" in texts[2]
    assert "[session wecom:group-b] user" in texts[3]
    assert "[user profile] memory" in texts[4] and "bob 喜欢乌龙茶" in texts[4]
    assert all("group-a" not in t and "群A" not in t and "alice" not in t for t in texts)


async def test_an_agent_scoped_agent_searches_all_its_sessions_and_memory_but_never_other_agents(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "other")
    async with build_gateway(settings) as gw:  # scope "auto": CLI and HTTP chats are agent-scoped
        await gw.history.append(SessionKey("default", "http", "g1"), _user("会议室叫夜莺厅"))
        await gw.history.append(SessionKey("default", "cli", "g2"), _user("夜莺"), _user("我最喜欢的鸟是夜莺"))
        await gw.history.append(SessionKey("default", "http", "g3"), _user("鸟"), _user("夜"), _user("好"))
        await gw.history.append(SessionKey("other", "http", "g1"), _user("另一个助手的夜莺秘密"))
        memory = gw.settings.data_dir / "default" / "memory" / "MEMORY.md"
        memory.parent.mkdir(parents=True, exist_ok=True)
        memory.write_text("- 用户的猫叫夜莺\n", encoding="utf-8")
        (text, _), (bird, _), (night, _) = await _search(
            gw, fake_llm, {"query": "夜莺"}, {"query": "鸟"}, {"query": "夜"}
        )
    # 1- and 2-character words, also a whole message and the very end of one
    # Chinese is cut into bigrams and characters: the passages holding 夜莺 come first, then the lone 夜 (one
    # character of it), then the one the first hit already shows as its turn after
    assert text.startswith('5 matches for "夜莺"'), text
    hits = [line for line in text.splitlines() if re.match(r"\d+\. ", line)]
    assert [h.rsplit(": ", 1)[1] for h in hits][3:] == ["夜", "我最喜欢的鸟是夜莺"], text
    assert all("夜莺" in h for h in hits[:3]), text
    g2_lines = [line for line in text.splitlines() if "[session cli:g2] user" in line]
    assert sorted(line.rsplit(": ", 1)[1] for line in g2_lines) == ["夜莺", "我最喜欢的鸟是夜莺"]
    # a character asked alone finds the passages holding it, the message that is only that character first
    assert bird.startswith('2 matches for "鸟"') and night.startswith('5 matches for "夜"'), (bird, night)
    assert night.splitlines()[1].endswith(": 夜"), night
    assert "[session http:g1] user" in text and "会议室叫夜莺厅" in text
    assert "[agent memory] memory" in text and "用户的猫叫夜莺" in text
    assert "另一个助手" not in text


async def test_an_agent_scoped_chat_never_finds_the_text_of_a_chat_scoped_chat_of_the_same_agent(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "all-chat", {"memory": {"scope": "chat"}})
    async with build_gateway(settings) as gw:  # "auto": WeCom/Feishu chats are chat-scoped, HTTP/CLI agent-scoped
        await gw.history.append(SessionKey("default", "wecom", "alice-private"), _user("我的银行卡密码是夜莺1234"))
        await gw.history.append(SessionKey("default", "feishu", "ou_carol"), _user("飞书里的夜莺口令"))
        await gw.history.append(SessionKey("default", "cli", "desk"), _user("控制台记下的夜莺笔记"))
        await gw.history.append(SessionKey("all-chat", "http", "other-visitor"), _user("另一位访客的夜莺"))
        ((http, _),) = await _search(gw, fake_llm, {"query": "夜莺"}, channel="http", chat="web-visitor", sender="bob")
        ((wecom, _),) = await _search(gw, fake_llm, {"query": "夜莺"}, channel="wecom", chat="bob-private")
        ((scoped_http, _),) = await _search(
            gw, fake_llm, {"query": "夜莺"}, channel="http", chat="visitor", agent="all-chat"
        )
    assert http.startswith('1 match for "夜莺"') and "[session cli:desk] user" in http, http
    assert "银行卡" not in http and "飞书" not in http
    assert wecom == 'no matches for "夜莺"'
    assert scoped_http == 'no matches for "夜莺"'  # scope "chat": even an HTTP chat sees only itself


async def test_a_memory_file_written_between_searches_is_found_in_its_new_version(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(
        reply_tool("write_memory", {"content": "- 车牌号是京A12345"}),
        reply_tool("memory_search", {"query": "京A12345"}),
        reply_tool("write_memory", {"content": "- 车牌号换成了沪B67890", "mode": "replace"}),
        reply_tool("memory_search", {"query": "车牌号"}),
        reply_text("done"),
    )
    events = [e async for e in await gateway.submit(InboundMessage("cli", "direct", "me", "car"))]
    assert isinstance(events[-1], DoneEvent)
    first, second = (_text_of(r) for r in _tool_results(fake_llm) if "match" in _text_of(r))
    assert "[agent memory] memory" in first and "京A12345" in first
    assert "沪B67890" in second and "京A12345" not in second


async def test_search_results_and_read_file_results_are_never_indexed_themselves(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "reader", {"tools": ["read_file"]})
    workspace = settings.workspace_dir / "reader"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("文件里的孔雀密码 peacock-file", encoding="utf-8")
    async with build_gateway(settings) as gw:
        await gw.history.append(SessionKey("reader", "cli", "old"), _user("很久以前提到过夜莺"))
        fake_llm.script(
            reply_tool("read_file", {"path": "notes.txt"}),
            reply_tool("memory_search", {"query": "夜莺"}),
            reply_text("已读完"),
        )
        events = [e async for e in await gw.submit(InboundMessage("cli", "direct", "me", "读文件", agent="reader"))]
        assert isinstance(events[-1], DoneEvent)
        results = await _search(gw, fake_llm, {"query": "peacock"}, {"query": "夜莺"}, agent="reader")
    assert results[0] == ('no matches for "peacock"', False)
    assert results[1][0].startswith('1 match for "夜莺"') and "[session cli:old]" in results[1][0]


async def test_bad_input_is_a_clear_error_to_the_model(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    results = await _search(
        gateway, fake_llm, {"query": "   "}, {"query": "夜莺", "limit": 0}, {"limit": 3}, {"query": "？！…"}
    )
    assert results == [
        ("query must be a non-empty string: the question or keywords to search for", True),
        ("limit must be a positive integer", True),
        ("query must be a non-empty string: the question or keywords to search for", True),
        ("query has no words to search for (only punctuation or symbols)", True),
    ]


async def test_compaction_keeps_archived_text_findable_exactly_once(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    key = SessionKey("default", "http", "long")
    messages = [_user(PLANTED, PLANTED_AT), *(_user(f"第{i}条普通消息 plain {i}") for i in range(14))]
    await gateway.history.append(key, *messages)
    ((before, _),) = await _search(gateway, fake_llm, {"query": "夜莺"})  # the index is open and current
    assert "[session http:long] user" in before
    kept = await gateway.history.load(key)
    summary = {"role": "system", "content": "[历史摘要] 用户说过暗号"}
    await gateway.history.replace(key, [summary, *kept[-10:]])
    (text, _), (recent, _), (summarised, _) = await _search(
        gateway, fake_llm, {"query": "夜莺", "limit": 20}, {"query": "plain", "limit": 20}, {"query": "历史摘要"}
    )
    assert text.startswith('1 match for "夜莺"'), text
    assert "[session http:long, archived] user " + _iso(PLANTED_AT) in text
    assert recent.startswith('14 matches for "plain"')
    assert recent.count(", archived]") == 4
    assert "[session http:long] system" in summarised
    layout = AgentLayout(gateway.settings.data_dir, "default")
    rows = _index_rows(gateway.settings, "default", key)
    assert len(rows) == 16  # 15 messages (5 archived + 10 kept) and the summary, each once
    assert len(jsonl.read_records(layout.archive_file(key))) == 5


async def test_a_deleted_session_is_gone_from_the_index_also_after_a_restart(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    key = SessionKey("default", "http", "doomed")
    async with build_gateway(settings) as gw:
        await gw.history.append(key, _user(PLANTED), *(_user(f"填充 filler {i}") for i in range(25)))
        await gw.history.replace(key, (await gw.history.load(key))[-20:])  # the planted text is archived
        assert (await _search(gw, fake_llm, {"query": "夜莺"}))[0][0].startswith("1 match")
        await gw.history.delete(key)
        ((after, _),) = await _search(gw, fake_llm, {"query": "夜莺"})
        assert after == 'no matches for "夜莺"'
    assert _index_rows(settings, "default", key) == []
    async with build_gateway(settings) as gw:
        (restarted, _), (filler, _) = await _search(gw, fake_llm, {"query": "夜莺"}, {"query": "filler"})
    assert restarted == 'no matches for "夜莺"' and filler == 'no matches for "filler"'


async def test_the_index_survives_a_restart_and_catches_up_with_files_changed_while_down(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    grown, rewritten, removed, untouched = (
        SessionKey("default", "http", c) for c in ("grown", "rewritten", "gone", "same")
    )
    async with build_gateway(settings) as gw:
        for key in (grown, rewritten, removed, untouched):
            await gw.history.append(key, _user(f"{key.chat_id} 的第一条 first-{key.chat_id}"))
        await _search(gw, fake_llm, {"query": "first"})
    before = _index_rows(settings, "default", untouched)
    layout = AgentLayout(settings.data_dir, "default")
    # while nothing runs: a file grows, one is rewritten, one goes, a new one appears
    jsonl.append_records(layout.history_file(grown), [_user("后来补上的夜莺 appended-later")], fsync=False)
    jsonl.replace_records(layout.history_file(rewritten), [_user("重写后的孔雀 rewritten-text")], fsync=False)
    layout.history_file(removed).unlink()
    fresh = SessionKey("default", "http", "fresh")
    jsonl.append_records(layout.history_file(fresh), [_user("全新的会话 brand-new")], fsync=False)

    async with build_gateway(settings) as gw:
        results = await _search(
            gw,
            fake_llm,
            {"query": "appended-later"},
            {"query": "first-rewritten"},
            {"query": "孔雀"},
            {"query": "first-gone"},
            {"query": "brand-new"},
            {"query": "first-same"},
            {"query": "first", "limit": 10},
        )
    texts = [t for t, _ in results]
    assert "[session http:grown] user" in texts[0]
    assert "的第一条 first-rewritten" not in texts[1]  # ranked: its parts still find others, the old text is gone
    assert "[session http:rewritten] user" in texts[2]
    assert "的第一条 first-gone" not in texts[3] and "http:gone" not in texts[3]
    assert "[session http:fresh] user" in texts[4]
    assert "[session http:same] user" in texts[5]
    assert texts[6].startswith('2 matches for "first"')  # grown and same, each once
    assert _index_rows(settings, "default", untouched) == before  # an unchanged file is not indexed again


async def test_many_writers_at_the_same_moment_are_all_indexed_once(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    shared = SessionKey("default", "http", "busy")
    await gateway.history.append(shared, *(_user(f"旧消息 old-{i}") for i in range(30)))
    start = asyncio.Event()

    async def write(i: int) -> None:
        await start.wait()
        await gateway.history.append(SessionKey("default", "http", f"w{i}"), _user(f"并发写入 writer-{i}"))
        await gateway.history.append(shared, _user(f"共享会话 shared-{i}"))

    async def compact() -> None:
        await start.wait()
        kept = await gateway.history.load(shared)
        await gateway.history.replace(shared, kept[-5:])

    tasks = [asyncio.create_task(write(i)) for i in range(40)] + [asyncio.create_task(compact())]
    await asyncio.sleep(0)
    start.set()
    await asyncio.gather(*tasks)
    results = await _search(
        gateway,
        fake_llm,
        {"query": "writer", "limit": 20},
        {"query": "shared", "limit": 20},
        {"query": "old", "limit": 20},
    )
    assert results[0][0].startswith('20 matches for "writer"')
    rows = _index_rows(gateway.settings, "default", shared)
    texts = sorted(t for _, t in rows)
    assert texts == sorted([f"旧消息 old-{i}" for i in range(30)] + [f"共享会话 shared-{i}" for i in range(40)])
    for i in range(40):
        assert len(_index_rows(gateway.settings, "default", SessionKey("default", "http", f"w{i}"))) == 1


async def test_a_broken_index_file_is_rebuilt_from_the_histories(settings: Settings, fake_llm: FakeAnthropic) -> None:
    key = SessionKey("default", "http", "kept")
    async with build_gateway(settings) as gw:
        await gw.history.append(key, _user(PLANTED))
        assert (await _search(gw, fake_llm, {"query": "夜莺"}))[0][0].startswith("1 match")
    path = index_path(AgentLayout(settings.data_dir, "default"))
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    path.write_bytes(b"this is not a database" * 100)
    async with build_gateway(settings) as gw:
        ((text, is_error),) = await _search(gw, fake_llm, {"query": "夜莺"})
    assert not is_error and text.startswith('1 match for "夜莺"') and "[session http:kept]" in text


async def test_turns_of_many_chats_answered_at_the_same_moment_are_all_found(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.first_byte_delay_s = 0.3  # every answer is held, then they all land together
    fake_llm.responder = lambda body: reply_text("回执 receipt-" + re.findall(r"sent-(\d+)", last_user_text(body))[0])
    handles = [
        await gateway.submit(InboundMessage("http", f"room{i}", f"u{i}", f"同时发送 sent-{i}")) for i in range(20)
    ]
    await fake_llm.wait_for_requests(20)
    for handle in handles:
        events = [e async for e in handle]
        assert isinstance(events[-1], DoneEvent)
    fake_llm.first_byte_delay_s, fake_llm.responder = 0.0, None
    (sent, _), (receipts, _) = await _search(
        gateway, fake_llm, {"query": "sent", "limit": 20}, {"query": "receipt", "limit": 20}
    )
    assert sent.startswith('20 matches for "sent"') and receipts.startswith('20 matches for "receipt"')
    for i in range(20):
        rows = _index_rows(gateway.settings, "default", SessionKey("default", "http", f"room{i}"))
        assert [t for _, t in rows] == [f"同时发送 sent-{i}", f"回执 receipt-{i}"]


async def test_a_message_left_in_both_archive_and_history_by_a_crash_is_one_hit(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    key = SessionKey("default", "http", "crashed")
    layout = AgentLayout(gateway.settings.data_dir, "default")
    planted = _user(PLANTED, PLANTED_AT)
    # archive-then-replace cut twice between the two steps: the message is archived twice and still in the history
    jsonl.append_records(layout.archive_file(key), [planted, planted], fsync=False)
    jsonl.append_records(layout.history_file(key), [planted, _user("之后的消息 later")], fsync=False)
    ((text, _),) = await _search(gateway, fake_llm, {"query": "夜莺"})
    assert text.startswith('1 match for "夜莺"'), text
    assert len(_index_rows(gateway.settings, "default", key)) == 4  # indexed as stored, shown once


async def test_history_observers_hear_each_write_after_it_landed_and_cannot_fail_it(tmp_path: Path) -> None:
    history = SessionHistory(tmp_path / "data", fsync=False)
    key = SessionKey("default", "http", "observed")
    heard: list[tuple[str, int]] = []

    def observe(op: str, changed: SessionKey) -> None:
        assert changed == key
        path = history.layout("default").history_file(key)
        heard.append((op, len(jsonl.read_records(path))))  # what is on disk when the observer hears of it

    def broken(op: str, changed: SessionKey) -> None:
        raise RuntimeError("observer bug")

    history.observers += [broken, observe]
    await history.append(key, _user("one"), _user("two"))
    await history.replace(key, [_user("two")])
    await history.clear(key)
    await history.append(key, _user("three"))
    assert await history.delete(key)
    assert heard == [("append", 2), ("replace", 1), ("clear", 0), ("append", 1), ("delete", 0)]


async def test_equally_good_hits_are_listed_newest_first(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    day = 86_400_000
    for chat, ts in (("middle", PLANTED_AT), ("newest", PLANTED_AT + day), ("oldest", PLANTED_AT - day)):
        await gateway.history.append(SessionKey("default", "http", chat), _user(f"{chat} 的夜莺", ts))
    ((text, _),) = await _search(gateway, fake_llm, {"query": "夜莺"})
    chats = [line.split("http:")[1].split("]")[0] for line in text.splitlines()[1:]]
    assert chats == ["newest", "middle", "oldest"]


async def _burst(history: SessionHistory, busy: SessionKey, others: int, appends: int) -> None:
    """`appends` appends to `busy` and one to each of `others` sessions, all started at the same moment."""
    start = asyncio.Event()

    async def write(key: SessionKey, text: str) -> None:
        await start.wait()
        await history.append(key, _user(text))

    tasks = [asyncio.create_task(write(busy, f"忙碌 busy-{i}")) for i in range(appends)]
    tasks += [
        asyncio.create_task(write(SessionKey("default", "http", f"o{i}"), f"其他 other-{i}")) for i in range(others)
    ]
    await asyncio.sleep(0)
    start.set()
    await asyncio.gather(*tasks)


async def test_a_burst_of_appends_is_read_once_per_session_and_a_search_right_after_sees_all(tmp_path: Path) -> None:
    history = SessionHistory(tmp_path / "data", fsync=False)
    service = SearchService(tmp_path / "data", sync_delay_s=3600)  # only the search itself can bring them in
    history.observers.append(service.history_changed)
    busy = SessionKey("default", "http", "busy")
    try:
        await _burst(history, busy, others=10, appends=40)
        everywhere = SearchScope(None, agent_scoped=lambda _: True)
        busy_hits = await service.search("default", "busy", everywhere, 100)
        other_hits = await service.search("default", "other", everywhere, 100)
        assert sorted(h.passage.text for h in busy_hits) == sorted(f"忙碌 busy-{i}" for i in range(40))
        assert sorted(h.passage.text for h in other_hits) == sorted(f"其他 other-{i}" for i in range(10))
        assert service.sessions_read == 11  # one read per session, not one per append
    finally:
        await service.close()


async def test_appends_reach_the_index_by_themselves_after_the_delay(tmp_path: Path) -> None:
    history = SessionHistory(tmp_path / "data", fsync=False)
    service = SearchService(tmp_path / "data", sync_delay_s=0.01)
    history.observers.append(service.history_changed)
    busy = SessionKey("default", "http", "busy")
    try:
        await _burst(history, busy, others=3, appends=5)
        expected = [f"忙碌 busy-{i}" for i in range(5)]
        for _ in range(500):  # no search asks: the delay alone brings them in
            read = service.sessions_read >= 4  # the index is open (its tables made) before it reads a session
            if read and [t for _, t in _index_rows_at(tmp_path / "data", busy)] == expected:
                break
            await asyncio.sleep(0.01)
        assert [t for _, t in _index_rows_at(tmp_path / "data", busy)] == expected
    finally:
        await service.close()
