"""Recall without being asked (`memory.recall = "auto"`): what the model's request carries, through the fake model
and the real SDK: archived facts of this chat's scope, never another chat's nor what the context holds already,
within the token budget, after the cached prefix, never stored; off by default; a slow search costs only the recall."""

from __future__ import annotations

import json
from typing import Any

from structlog.testing import LogCapture

from agenthub.agent.recall import HEADER, query_of
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.llm.tokens import estimate_text_tokens
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, reply_text, reply_tool

FACT = "顺便说一下，我们的暗号是夜莺，the password is nightingale"
FACT_AT = 1_764_000_000_000  # ms
PERSONA = "You are a helpful assistant."
AUTO = {"memory": {"recall": "auto"}}


def _user(text: str, ts: int | None = None) -> dict[str, Any]:
    return {"role": "user", "content": text, **({"timestamp": ts} if ts is not None else {})}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


async def _archive_fact(gw: GatewayCore, key: SessionKey, fact: str = FACT) -> None:
    """`fact` said early in `key`'s chat, then compacted away into the archive: no longer in the working context."""
    await gw.history.append(key, _user(fact, FACT_AT), _assistant("好的，记住了"))
    await gw.history.append(key, *(m for i in range(12) for m in (_user(f"闲聊 chat {i}"), _assistant(f"ok {i}"))))
    await gw.history.replace(key, (await gw.history.load(key))[-10:])


async def _turn(
    gw: GatewayCore, fake: FakeAnthropic, text: str, *, agent: str | None = None, channel: str = "http", chat: str = "c"
) -> list[dict[str, Any]]:
    """One turn; the content blocks of the newest message of the request the model got."""
    fake.script(reply_text("ok"))
    message = InboundMessage(channel, chat, "me", text, agent=agent, timestamp=FACT_AT + 86_400_000)
    events = [e async for e in await gw.submit(message)]
    assert isinstance(events[-1], DoneEvent), events[-1]
    newest = fake.message_requests()[-1].body["messages"][-1]  # type: ignore[index]
    assert newest["role"] == "user"
    return list(newest["content"])


def _recalled(blocks: list[dict[str, Any]]) -> str:
    texts = [b["text"] for b in blocks if b.get("type") == "text" and b["text"].startswith(HEADER)]
    assert len(texts) <= 1
    return texts[0] if texts else ""


async def test_an_archived_fact_goes_with_the_question_after_the_cache_mark_and_is_never_stored(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "rec", AUTO)
    key = SessionKey("rec", "http", "c")
    async with build_gateway(settings) as gw:
        await _archive_fact(gw, key)
        blocks = await _turn(gw, fake_llm, "Remind me, what was our password again?", agent="rec")
        history = await gw.history.load(key)
    recalled = _recalled(blocks)
    assert "the password is nightingale" in recalled and "chat http:c, archived" in recalled
    assert blocks[-1]["text"] == recalled and "cache_control" not in blocks[-1]
    assert blocks[-2]["cache_control"] == {"type": "ephemeral"}  # the user's own words end the cached prefix
    stored = json.dumps(history, ensure_ascii=False)
    assert HEADER not in stored and stored.count("the password is nightingale") == 0  # archived, not stored again


async def test_a_chinese_question_recalls_the_archived_fact(settings: Settings, fake_llm: FakeAnthropic) -> None:
    write_agent(settings.agents_dir, "rec", AUTO)
    async with build_gateway(settings) as gw:
        await _archive_fact(gw, SessionKey("rec", "feishu", "ou_1"), "记一下：我家的 Wi-Fi 密码是 lanmao-2046")
        blocks = await _turn(gw, fake_llm, "我家的Wi-Fi密码是多少来着？", agent="rec", channel="feishu", chat="ou_1")
    assert "lanmao-2046" in _recalled(blocks) and "chat feishu:ou_1, archived" in _recalled(blocks)


async def test_recall_is_off_by_default(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    await _archive_fact(gateway, SessionKey("default", "http", "c"))
    blocks = await _turn(gateway, fake_llm, "nightingale")
    assert _recalled(blocks) == "" and len(blocks) == 1


async def test_a_chat_scoped_chat_never_recalls_another_chats_words(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "team", {"memory": {"recall": "auto", "scope": "chat"}})
    async with build_gateway(settings) as gw:
        await _archive_fact(gw, SessionKey("team", "wecom", "group-a"))
        await _archive_fact(gw, SessionKey("team", "wecom", "group-b"), "群B的口令 nightingale 是 oriole")
        blocks = await _turn(gw, fake_llm, "nightingale", agent="team", channel="wecom", chat="group-b")
    recalled = _recalled(blocks)
    assert "oriole" in recalled and "group-b" in recalled
    assert "password" not in recalled and "group-a" not in recalled


async def test_what_the_working_context_holds_is_not_recalled_again(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "rec", AUTO)
    async with build_gateway(settings) as gw:
        key = SessionKey("rec", "http", "c")
        await gw.history.append(key, _user(FACT, FACT_AT), _assistant("好的 nightingale 记住了"))
        first = await _turn(gw, fake_llm, "nightingale", agent="rec")
        await _archive_fact(gw, SessionKey("rec", "cli", "desk"), "another chat: nightingale sings at night")
        second = await _turn(gw, fake_llm, "nightingale", agent="rec")
    assert _recalled(first) == ""  # the fact, the reply and the question itself are all in the request already
    recalled = _recalled(second)
    assert "sings at night" in recalled and "password" not in recalled and "记住了" not in recalled


async def test_words_holding_nul_that_the_working_context_holds_are_not_recalled_again(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """The index keeps a NUL as U+FFFD (PostgreSQL refuses NUL): the context's words are compared so kept too, or the
    same message said in another chat comes back as a recalled passage beside itself."""
    write_agent(settings.agents_dir, "rec", AUTO)
    said = "the gate code is\x00 nightingale-7"
    async with build_gateway(settings) as gw:
        await _archive_fact(gw, SessionKey("rec", "cli", "desk"), said)
        alone = _recalled(await _turn(gw, fake_llm, "nightingale-7", agent="rec", chat="other"))
        await gw.history.append(SessionKey("rec", "http", "c"), _user(said, FACT_AT), _assistant("ok"))
        held = _recalled(await _turn(gw, fake_llm, "nightingale-7", agent="rec"))
    assert "the gate code is\ufffd nightingale-7" in alone  # found while the context does not hold it
    assert "the gate code" not in held, held


async def test_the_recalled_passages_keep_to_the_token_budget(settings: Settings, fake_llm: FakeAnthropic) -> None:
    write_agent(settings.agents_dir, "rec", {"memory": {"recall": "auto", "recall_tokens": 120}})
    key = SessionKey("rec", "http", "c")
    long_facts = [f"nightingale note {i}: " + "夜莺在花园里唱歌 the bird sang all night long. " * 20 for i in range(8)]
    async with build_gateway(settings) as gw:
        await gw.history.append(key, *(_user(f) for f in long_facts))
        await gw.history.append(key, *(_user(f"filler {i}") for i in range(12)))
        await gw.history.replace(key, (await gw.history.load(key))[-10:])
        recalled = _recalled(await _turn(gw, fake_llm, "nightingale", agent="rec"))
    assert "nightingale note" in recalled
    assert 60 < estimate_text_tokens(recalled) <= 120


async def test_the_cached_prefix_is_byte_identical_with_and_without_recall(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "plain", {}, persona=PERSONA)
    write_agent(settings.agents_dir, "rec", AUTO, persona=PERSONA)
    async with build_gateway(settings) as gw:
        for agent in ("plain", "rec"):
            await _archive_fact(gw, SessionKey(agent, "http", "c"))
            await _turn(gw, fake_llm, "nightingale", agent=agent)
    plain, recalled = (r.body for r in fake_llm.message_requests()[-2:])
    assert plain is not None and recalled is not None
    newest = recalled["messages"][-1]["content"]
    assert _recalled(newest) and not _recalled(plain["messages"][-1]["content"])
    without = {**recalled, "messages": [*recalled["messages"][:-1], {"role": "user", "content": newest[:-1]}]}
    assert json.dumps(without, sort_keys=True) == json.dumps(plain, sort_keys=True)


async def test_a_slow_search_costs_the_turn_its_recall_only_with_one_log_line(
    settings_factory: Any, fake_llm: FakeAnthropic, log_capture: LogCapture
) -> None:
    settings = settings_factory(memory={"recall": "auto", "recall_timeout_s": 0.000001})
    async with build_gateway(settings) as gw:
        await _archive_fact(gw, SessionKey("default", "http", "c"))
        blocks = await _turn(gw, fake_llm, "nightingale")
    assert _recalled(blocks) == "" and len(blocks) == 1
    skipped = [e for e in log_capture.entries if e["event"] == "recall_skipped"]
    assert [e["reason"] for e in skipped] == ["slow"]


def test_the_query_is_the_words_of_the_turns_own_messages() -> None:
    earlier = [_user("unanswered before"), _assistant("a reply"), _user("no reply to this one")]
    together = {"role": "user", "content": [{"type": "text", "text": "and the oriole"}], "together": True}
    assert query_of([*earlier, _user("the  nightingale\n"), together]) == "the nightingale and the oriole"
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}
    assert query_of([*earlier, _assistant("calling"), result]) == ""


async def test_a_tool_steps_later_calls_leave_the_recall_out_so_their_cached_prefix_is_the_stored_one(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "rec", AUTO)
    key = SessionKey("rec", "http", "c")
    async with build_gateway(settings) as gw:
        await _archive_fact(gw, key)
        fake_llm.script(reply_tool("read_memory", {}), reply_text("nightingale"))
        message = InboundMessage("http", "c", "me", "What was our password?", agent="rec", timestamp=FACT_AT + 1)
        events = [e async for e in await gw.submit(message)]
        assert isinstance(events[-1], DoneEvent), events[-1]
        first, second = (r.body["messages"] for r in fake_llm.message_requests()[-2:])  # type: ignore[index]
    asked = -3  # the second call: the user's message, then the tool step (assistant, results)
    assert second[-2]["role"] == "assistant" and second[-1]["role"] == "user"
    assert _recalled(first[-1]["content"])  # the first call carries the recalled passages
    assert not _recalled(second[asked]["content"])  # the tool step's call does not: its prefix is what is stored
    assert second[asked]["content"] == first[-1]["content"][:-1]  # the user's words as the first call had them
