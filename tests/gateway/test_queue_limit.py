"""A chat's queue is bounded (`session.max_queued`): one message too many ends at once and nothing of it is stored."""

from __future__ import annotations

from collections.abc import Callable

from structlog.testing import capture_logs

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, NoticeEvent
from tests.support.fakes.anthropic import FakeAnthropic, hang
from tests.support.memory import msg, settle


async def test_a_message_beyond_the_limit_is_refused_and_not_stored(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    assert settings.session.max_queued == 200
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        fake_llm.script(hang())
        running = await gw.submit(msg("slow one"))
        await fake_llm.wait_for_requests(1)
        waiting = [await gw.submit(msg(f"waiting {i}")) for i in range(200)]
        with capture_logs() as logs:
            refused = await gw.submit(msg("one too many"))
        events = [e async for e in refused]
        assert len(events) == 1 and isinstance(events[0], ErrorEvent)
        assert events[0].code == "queue_full"
        assert events[0].message == (
            "This chat already has 200 messages waiting; please wait for the replies or send /stop."
        )
        assert any(e["event"] == "queue_full" and e["waiting"] == 200 for e in logs)
        other = await (await gw.submit(msg("another chat", chat="c2"))).result()
        assert isinstance(other, DoneEvent)  # only that chat is full

        assert gw.drop_queued(key, "u1") == 200  # room again: the next message queues as usual
        queued = await gw.submit(msg("after the drop"))
        assert gw.abort(key)
        assert isinstance(await running.result(), ErrorEvent)
        events = [e async for e in queued]
        assert isinstance(events[0], NoticeEvent) and isinstance(events[-1], DoneEvent)
        assert [type(await h.result()) for h in waiting] == [ErrorEvent] * 200
        await settle(gw, key)
        stored = [m["content"] for m in await gw.history.load(key)]
        assert stored[0] == "slow one" and "after the drop" in stored and "one too many" not in stored


async def test_the_limit_is_configurable(settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic) -> None:
    async with build_gateway(settings_factory(session={"max_queued": 1})) as gw:
        key = gw.resolve_key(msg("x"))[1]
        fake_llm.script(hang())
        await gw.submit(msg("slow one"))
        await fake_llm.wait_for_requests(1)
        await gw.submit(msg("waits"))
        final = await (await gw.submit(msg("refused"))).result()
        assert isinstance(final, ErrorEvent) and final.message.startswith("This chat already has 1 messages waiting")
        gw.abort(key)
        await settle(gw, key)
