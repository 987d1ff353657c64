"""A cancelled usage write: the rows leave the pending ones only when the write really ended (never counted twice,
never lost)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agenthub.clock import system_clock
from agenthub.llm.types import CallOwner, LLMRequest, LLMResponse
from agenthub.messages import Usage
from agenthub.storage.usage_files import FileUsageStore
from agenthub.usage.periods import day_of
from agenthub.usage.recorder import UsageRecorder
from tests.support.gated_pool import GatedPool

ASKS = LLMRequest(
    "m", [], [{"role": "user", "content": "q"}], [], 200, purpose="turn", owner=CallOwner("a", "wecom", "g", "bob")
)
REPLY = LLMResponse([{"type": "text", "text": "ok"}], "end_turn", Usage(input_tokens=100, output_tokens=5))


@pytest.mark.parametrize("lands", [True, False])
async def test_a_flush_cancelled_while_its_write_runs_counts_the_call_once(tmp_path: Path, lands: bool) -> None:
    """The flush is cancelled while the store's append runs in its thread; the append ends (written, or refused):
    a later flush writes the call only if it was not written."""
    loop = asyncio.get_running_loop()

    def chooses(func: Any, args: tuple[Any, ...]) -> bool:
        return getattr(func, "__qualname__", "").endswith("FileUsageStore._append")

    pool = GatedPool(loop, chooses)
    loop.set_default_executor(pool)
    store = FileUsageStore(tmp_path)
    recorder = UsageRecorder(store, ZoneInfo("UTC"), system_clock, gather_s=3600.0)
    try:
        recorder.watch(ASKS, REPLY)
        day = day_of(system_clock(), ZoneInfo("UTC"))
        flushing = asyncio.create_task(recorder.flush())
        await asyncio.wait_for(pool.started.wait(), 2)
        flushing.cancel()
        await asyncio.sleep(0.05)
        journal = tmp_path / "usage" / day[:7] / f"{day}.jsonl"
        if not lands:  # the held append is refused: a directory where the journal goes
            journal.mkdir(parents=True)
        pool.gate.set()
        await asyncio.wait([flushing])
        assert flushing.cancelled()
        if not lands:
            journal.rmdir()
        await recorder.flush()
        rows = await FileUsageStore(tmp_path).days("2000-01-01", "2100-01-01")
        assert [(r.calls, r.tokens) for r in rows] == [(1, 105)]
    finally:
        await recorder.aclose()
