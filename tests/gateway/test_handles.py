"""Review findings in the core's concurrency: every handle ends, a hold keeps its session, history writes finish."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable

from agenthub.config import Settings
from agenthub.errors import SessionBusyError
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage
from agenthub.session_keys import SessionKey
from agenthub.storage import jsonl
from agenthub.storage.files import FileSessionStore
from tests.support.fakes.anthropic import FakeAnthropic, reply_text

KEY = SessionKey("default", "cli", "direct")


def _msg(text: str) -> InboundMessage:
    return InboundMessage("cli", "direct", "me", text)


async def _until(condition: Callable[[], bool]) -> None:
    """Yield to the loop (no timed sleeps) until `condition` holds, for a bounded number of loop turns."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


async def test_a_message_waiting_behind_maintenance_gets_an_error_on_shutdown(settings: Settings) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def maintenance(gw: GatewayCore) -> None:
        async with gw.exclusive(KEY):
            entered.set()
            await release.wait()

    gw = build_gateway(settings)
    async with gw:
        holder = asyncio.create_task(maintenance(gw))
        await entered.wait()
        waiting = await gw.submit(_msg("arrives during compaction"))
        runner = gw.sessions.get(KEY)
        assert runner is not None
        await _until(lambda: runner.task is not None)  # its worker runs, waiting for the hold
    final = await asyncio.wait_for(waiting.result(), 2)
    assert isinstance(final, ErrorEvent) and final.code == "shutdown"
    release.set()
    await holder


async def test_stop_drops_a_message_that_waits_behind_maintenance(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    release, entered = asyncio.Event(), asyncio.Event()

    async def maintenance() -> None:  # what /compact and AutoCompact do: hold the session exclusively
        async with gateway.exclusive(KEY):
            entered.set()
            await release.wait()

    holder = asyncio.create_task(maintenance())
    await entered.wait()
    waiting = await gateway.submit(_msg("arrives during compaction"))
    for _ in range(20):  # let its worker run up to the session lock the maintenance holds
        await asyncio.sleep(0)
    stopped = await (await gateway.submit(_msg("/stop"))).result()
    assert isinstance(stopped, DoneEvent) and "Dropped 1 queued" in stopped.full_text
    final = await asyncio.wait_for(waiting.result(), 2)
    assert isinstance(final, ErrorEvent) and final.code == "stopped"
    release.set()
    await holder
    await asyncio.sleep(0.05)  # a wrongly kept message would now start its turn
    assert not fake_llm.message_requests()


async def test_stop_before_the_turn_task_first_runs_still_ends_the_handle(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    handle = await gateway.submit(_msg("stopped at once"))
    runner = gateway.sessions.get(KEY)
    assert runner is not None
    await _until(lambda: runner.turn_task is not None)  # no wait_for: its extra task would let the turn start
    assert gateway.abort(KEY, "stopped")  # the turn task exists but has not run a single step yet
    final = await asyncio.wait_for(handle.result(), 2)
    assert isinstance(final, ErrorEvent) and final.code == "stopped"
    assert not fake_llm.message_requests()


async def test_a_hold_that_waited_for_a_turn_keeps_the_session_busy(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("slow", first_byte_delay_s=0.2), reply_text("after the hold"))
    turn = await gateway.submit(_msg("first"))
    await fake_llm.wait_for_requests(1)
    entered, release = asyncio.Event(), asyncio.Event()

    async def restart_like() -> None:  # what /restart does: wait for the running turn, then hold the session
        async with gateway.hold(KEY):
            entered.set()
            await release.wait()

    holder = asyncio.create_task(restart_like())
    assert isinstance(await turn.result(), DoneEvent)
    await asyncio.wait_for(entered.wait(), 2)
    assert gateway.is_busy(KEY)
    try:
        async with gateway.exclusive(KEY):
            raise AssertionError("compaction ran while the session was held")
    except SessionBusyError:
        pass
    queued = await gateway.submit(_msg("second"))
    runner = gateway.sessions.get(KEY)
    assert runner is not None and runner.mutex.locked()
    release.set()
    await holder
    final = await asyncio.wait_for(queued.result(), 2)
    assert isinstance(final, DoneEvent) and final.full_text == "after the hold"


async def test_stop_during_the_reply_write_leaves_file_and_cache_agreeing(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    store = gateway.history.store
    assert isinstance(store, FileSessionStore)
    writer = store.writer
    reply_held, gate = asyncio.Event(), threading.Event()
    fake_llm.script(reply_text("the reply", hold=reply_held))
    handle = await gateway.submit(_msg("hello"))
    await fake_llm.wait_for_requests(1)  # the user message's batch has landed
    writer.thread.post(functools.partial(gate.wait, 5))  # the writer's thread is busy until the gate opens
    batches = writer.batches
    reply_held.set()
    await _until(lambda: writer.batches > batches)  # the reply's batch is in the writer's hands
    gateway.abort(KEY, "stopped")
    await asyncio.sleep(0)
    gate.set()
    await asyncio.wait_for(gateway.wait_turn_done(KEY), 2)
    await handle.result()
    on_disk = jsonl.read_records(gateway.history.layout("default").history_file(KEY))
    cached = await gateway.history.load(KEY)
    assert [m["role"] for m in cached] == [m["role"] for m in on_disk] == ["user", "assistant"]
