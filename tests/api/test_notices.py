"""Notices (provider fallback, compaction) reach non-streaming chat clients as `notices` in the JSON answer."""

from __future__ import annotations

from agenthub import i18n
from agenthub.session_keys import session_key
from tests.support.fakes.anthropic import FakeAnthropic, prompt_too_long, reply_text
from tests.support.harness import RunningApi
from tests.support.http import AGENT
from tests.support.memory import seed, summaries_then_default


async def test_json_chat_has_an_empty_notices_list_when_there_are_none(
    api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("plain"))
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "n0", "content": "hi"})
    assert status == 200
    assert body["reply"] == "plain" and body["notices"] == []


async def test_unknown_provider_hint_notice_is_in_the_json_answer(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("answered anyway"))
    status, body = await api.call(
        "POST", AGENT + "/chat", json={"chat_id": "n1", "content": "hi", "provider_hint": "nope"}
    )
    assert status == 200
    assert body["reply"] == "answered anyway"
    # the HTTP channel (and so the console) is zh-CN by default
    assert body["notices"] == [i18n.text("llm.hint.provider_unknown", "zh-CN", provider="'nope'", fallback="'default'")]


async def test_compaction_notice_is_in_the_json_answer(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    await seed(api.gateway, session_key("default", "http", "n2"), 30)
    fake_llm.responder = summaries_then_default()
    fake_llm.script(prompt_too_long())  # the first call overflows: compact, then the retry answers
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "n2", "content": "one more"})
    assert status == 200
    assert body["reply"].startswith("reply to: one more")
    assert body["notices"] == [i18n.text("notice.overflow_compacting", "zh-CN")]
