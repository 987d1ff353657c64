"""Every model call is recorded with its purpose and who it was for; summed per day in the configured zone."""

from __future__ import annotations

from pathlib import Path

from agenthub.clock import ManualClock
from agenthub.config import PriceSettings, Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.storage.usage import UsageRow
from agenthub.storage.usage_files import FileUsageStore
from agenthub.usage.report import group
from tests.support.fakes.anthropic import FakeAnthropic, reply_text

USAGE = {
    "input_tokens": 1000,
    "output_tokens": 200,
    "cache_read_input_tokens": 3000,
    "cache_creation_input_tokens": 500,
}


async def test_a_turn_is_recorded_with_who_and_the_vendor_counts(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    fake_llm.script(reply_text("hello", usage=USAGE))
    async with build_gateway(settings) as gw:
        final = await (await gw.submit(InboundMessage("wecom", "group-1", "zhangsan", "hi"))).result()
        assert isinstance(final, DoneEvent)
        assert gw.turn_services.usage is not None
        await gw.turn_services.usage.gate.drain()
        await gw.turn_services.usage.recorder.flush()
        rows = await gw.turn_services.usage.store.days("2000-01-01", "2100-01-01")
    assert len(rows) == 1
    row = rows[0]
    assert (row.purpose, row.agent, row.channel, row.chat_id, row.sender_id) == (
        "turn",
        "default",
        "wecom",
        "group-1",
        "zhangsan",
    )
    assert (row.input, row.output, row.cache_read, row.cache_write, row.estimated) == (1000, 200, 3000, 500, 0)
    assert row.model == settings.llm.model
    # the journal survives the process: a new store reads the same day back
    again = await FileUsageStore(settings.data_dir).days("2000-01-01", "2100-01-01")
    assert [(r.tokens, r.sender_id) for r in again] == [(4700, "zhangsan")]


async def test_a_vendor_without_usage_counts_the_estimate_and_says_so(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    none = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    fake_llm.script(reply_text("a reply of some words", usage=none))
    async with build_gateway(settings) as gw:
        await (await gw.submit(InboundMessage("cli", "c", "me", "count me please"))).result()
        assert gw.turn_services.usage is not None
        await gw.turn_services.usage.gate.drain()
        await gw.turn_services.usage.recorder.flush()
        rows = await gw.turn_services.usage.store.days("2000-01-01", "2100-01-01")
    assert rows[0].estimated == 1
    assert rows[0].input > 0 and rows[0].output > 0
    line = group(rows, "user", "day", {})[0].as_dict()
    assert line["estimated_calls"] == 1


async def test_a_scheduled_prompt_is_counted_as_a_job(settings: Settings, fake_llm: FakeAnthropic) -> None:
    async with build_gateway(settings) as gw:
        message = InboundMessage("cli", "c", "me", "[scheduled job j1] do it", metadata={"scheduled_job": "j1"})
        await (await gw.submit(message)).result()
        assert gw.turn_services.usage is not None
        await gw.turn_services.usage.recorder.flush()
        rows = await gw.turn_services.usage.store.days("2000-01-01", "2100-01-01")
    assert [r.purpose for r in rows] == ["job"]


def _row(model: str, day: str = "2026-12-03", **tokens: int) -> UsageRow:
    return UsageRow(day, "turn", "default", "http", "c1", "alice", model, **tokens)


def test_priced_models_show_cost_and_unpriced_ones_tokens_only() -> None:
    prices = {"priced": PriceSettings(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75, currency="USD")}
    rows = [
        _row("priced", input=1_000_000, output=100_000, cache_read=2_000_000, cache_write=0),
        _row("free-model", input=500),
    ]
    by_model = {line.who["model"]: line.as_dict() for line in group(rows, "model", "day", prices)}
    assert by_model["priced"]["cost"] == {"USD": round(3.0 + 1.5 + 0.6, 6)}
    assert by_model["free-model"]["cost"] is None
    assert by_model["free-model"]["tokens"] == 500
    by_user = group(rows, "user", "month", prices)
    assert [(line.period, line.who, line.tokens) for line in by_user] == [
        ("2026-12", {"channel": "http", "sender": "alice"}, 3_100_500)
    ]


async def test_a_past_day_is_rolled_up_once_read(tmp_path: Path) -> None:
    store = FileUsageStore(tmp_path)
    await store.add([_row("m", day="2020-01-02", input=10), _row("m", day="2020-01-02", input=5, output=1)])
    fresh = FileUsageStore(tmp_path)
    rows = await fresh.days("2020-01-01", "2020-01-31")
    assert [(r.input, r.output, r.calls) for r in rows] == [(15, 1, 2)]
    assert (tmp_path / "usage" / "2020-01" / "2020-01-02.rollup.json").is_file()
    assert [r.tokens for r in await FileUsageStore(tmp_path).days("2020-01-01", "2020-01-31")] == [16]


async def test_retention_keeps_400_days_and_folds_older_months_as_the_manual_clock_passes(
    backend_settings: Settings, fake_llm: FakeAnthropic
) -> None:
    fake_llm.default_usage = {"input_tokens": 100, "output_tokens": 20}
    clock = ManualClock(1_705_291_200.0)  # 2024-01-15 12:00 in Asia/Shanghai

    async def turn(gw: GatewayCore, text: str) -> list[UsageRow]:
        final = await (await gw.submit(InboundMessage("wecom", "g", "alice", text))).result()
        assert isinstance(final, DoneEvent)
        assert gw.turn_services.usage is not None
        await gw.turn_services.usage.recorder.flush()
        await gw.turn_services.usage.recorder.idle()  # its write, then retention (once a day)
        return await gw.turn_services.usage.store.days("2024-01-01", "2026-12-31")

    async with build_gateway(backend_settings, clock=clock) as gw:
        assert [r.day for r in await turn(gw, "january")] == ["2024-01-15"]
        clock.advance(400 * 86400)  # 2025-02-18: 2024-01 is still within 400 days
        assert [r.day for r in await turn(gw, "a year on")] == ["2024-01-15", "2025-02-18"]
        clock.advance(50 * 86400)  # 2025-04-09: every day of 2024-01 is older than 400 days
        rows = await turn(gw, "later")
    assert [(r.day, r.tokens, r.calls) for r in rows] == [
        ("2024-01", 120, 1),
        ("2025-02-18", 120, 1),
        ("2025-04-09", 120, 1),
    ]
