"""Usage over HTTP: a turn over budget is a 429 before any model call; `GET /api/usage` rows name the API token;
`/metrics` counts tokens per agent, purpose and kind and refusals per scope; `/usage` in a chat."""

from __future__ import annotations

from collections.abc import Callable

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import SENDER_NAME, InboundMessage
from agenthub.session_keys import session_key
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.harness import running_api
from tests.support.http import AGENT, assert_error
from tests.support.memory import seed, summaries_then_default

USAGE = {"input_tokens": 400, "output_tokens": 100, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 0}


async def test_over_budget_is_a_429_and_usage_names_the_token(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    prices = {"claude-sonnet-4-6": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}}
    settings = settings_factory(budgets={"user_day": 1000}, llm={"prices": prices})
    fake_llm.script(reply_text("first", usage=USAGE))
    async with running_api(settings) as api:
        status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "c1", "content": "hi"})
        assert status == 200, body
        assert api.gateway.turn_services.usage is not None
        await api.gateway.turn_services.usage.gate.drain()
        requests = len(fake_llm.message_requests())
        status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "c2", "content": "again"})
        assert status == 429
        assert_error(body, "budget_exceeded")
        assert "1000 tokens" in body["error"]["message"]
        assert len(fake_llm.message_requests()) == requests  # refused before any model call
        status, body = await api.call("GET", "/api/usage?by=user&period=month")
        assert status == 200
        [row] = body["rows"]
        assert (row["channel"], row["sender"], row["tokens"], row["calls"]) == ("http", "test", 1500, 1)
        assert row["sender_name"] == "test"  # on HTTP the sender is the API token's name
        assert row["cost"] == {"USD": round((400 * 3.0 + 100 * 15.0 + 1000 * 0.3) / 1e6, 6)}
        assert body["timezone"] == "Asia/Shanghai"
        status, body = await api.call("GET", "/api/usage?by=agent&period=day")
        assert [(r["agent"], r["input"], r["cache_read"]) for r in body["rows"]] == [("default", 400, 1000)]
        for query in ("by=person", "period=week", "from=yesterday", "from=2026-12-05&to=2026-12-01"):
            status, body = await api.call("GET", "/api/usage?" + query)
            assert status == 400
            assert_error(body, "invalid_query")
        async with api.client.get(api.base_url + "/metrics") as resp:
            metrics = await resp.text()
    assert 'agenthub_llm_tokens_total{agent="default",purpose="turn",kind="input"} 400' in metrics
    assert 'agenthub_llm_tokens_total{agent="default",purpose="turn",kind="cache_read"} 1000' in metrics
    assert 'agenthub_budget_refusals_total{scope="user"} 1' in metrics
    assert 'agenthub_budget_refusals_total{scope="chat"} 0' in metrics


async def test_usage_command_shows_today_this_month_and_what_is_left(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(budgets={"user_day": 10000, "chat_month": 50000})
    fake_llm.script(reply_text("ok", usage=USAGE), reply_text("ok", usage=USAGE))
    async with build_gateway(settings) as gw:
        await (await gw.submit(InboundMessage("wecom", "group", "zhangsan", "hi"))).result()
        await (await gw.submit(InboundMessage("wecom", "group", "lisi", "hi"))).result()
        zh = await (await gw.submit(InboundMessage("wecom", "group", "zhangsan", "/usage"))).result()
        en = await (await gw.submit(InboundMessage("cli", "solo", "me", "/usage"))).result()
    text = getattr(zh, "full_text", "")
    assert "你的用量" in text and "本会话的用量" in text
    assert "今天：1500 tokens，剩余 8500 / 10000" in text
    assert "本月：3000 tokens，剩余 47000 / 50000" in text
    assert "Your usage:" in getattr(en, "full_text", "")
    assert "Today: 0 tokens (no limit)" in getattr(en, "full_text", "")


async def test_usage_with_an_argument_answers_how_to_use_it_in_the_chats_language(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings_factory()) as gw:
        zh = await (await gw.submit(InboundMessage("wecom", "group", "zhangsan", "/usage month"))).result()
        en = await (await gw.submit(InboundMessage("cli", "solo", "me", "/usage month"))).result()
    zh_text, en_text = getattr(zh, "full_text", ""), getattr(en, "full_text", "")
    assert zh_text.startswith("用法：/usage") and "你的用量" not in zh_text, zh_text
    assert en_text.startswith("Usage: /usage") and "Your usage:" not in en_text, en_text
    assert not fake_llm.message_requests()  # a command, never a turn


async def test_per_person_rows_name_the_sender_the_channel_named_on_both_backends(
    backend_settings: Settings, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("ok", usage=USAGE), reply_text("ok", usage=USAGE), reply_text("ok", usage=USAGE))
    async with running_api(backend_settings) as api:
        named = InboundMessage("wecom", "group", "zhangsan", "hi", metadata={SENDER_NAME: "张三"})
        await (await api.gateway.submit(named)).result()
        await (await api.gateway.submit(InboundMessage("wecom", "group", "lisi", "hi"))).result()
        renamed = InboundMessage("wecom", "dm", "zhangsan", "hi", metadata={SENDER_NAME: "张三丰"})
        await (await api.gateway.submit(renamed)).result()
        status, body = await api.call("GET", "/api/usage?by=user&period=month")
    assert status == 200
    rows = {(r["channel"], r["sender"]): (r["sender_name"], r["tokens"]) for r in body["rows"]}
    assert rows == {("wecom", "zhangsan"): ("张三丰", 3000), ("wecom", "lisi"): (None, 1500)}


async def test_background_work_over_budget_is_counted_and_never_refused(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(budgets={"user_day": 1000, "chat_day": 1000, "agent_day": 1000})
    fake_llm.default_usage = {"input_tokens": 1200, "output_tokens": 300}
    async with running_api(settings) as api:
        status, _ = await api.call("POST", AGENT + "/chat", json={"chat_id": "c1", "content": "hi"})
        assert status == 200
        usage = api.gateway.turn_services.usage
        assert usage is not None
        await usage.gate.drain()
        status, _ = await api.call("POST", AGENT + "/chat", json={"chat_id": "c1", "content": "again"})
        assert status == 429  # every limit reached
        await seed(api.gateway, session_key("default", "http", "c1"), 30)
        fake_llm.responder = summaries_then_default()
        status, body = await api.call("POST", AGENT + "/sessions/c1/compact")  # a summary: background work
        assert status == 200 and body["messages_after"] < body["messages_before"]
        await usage.recorder.flush()
        rows = await usage.store.days("2000-01-01", "2100-01-01")
    by_purpose = {r.purpose: r.calls for r in rows}
    assert by_purpose == {"turn": 1, "flush": 1, "summary": 1}  # the memory flush before the summary too
