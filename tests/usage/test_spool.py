"""`UsageSpool` writes on its own thread, in the order given: rows, the "stored" notes and the emptying; a spool
closed with rows waiting keeps them for the next start."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from agenthub.storage.usage import UsageRow
from agenthub.usage.spool import UsageSpool


def _row(n: int) -> UsageRow:
    return UsageRow("2026-12-03", "turn", "default", "http", "c1", "alice", "m", n, 1, 0, 0, at=1.5e9 + n)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def _settled(spool: UsageSpool) -> None:
    """Every write given so far has run (the next one given runs after them)."""
    await spool.thread.run(lambda: None)


async def test_rows_and_notes_are_written_in_order_off_the_loop(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path / "spool")
    spool.append([_row(0)])
    await _settled(spool)
    held = threading.Event()
    spool.thread.post(held.wait)  # the writer thread busy: nothing more lands until it is set
    spool.append([_row(1), _row(2)])
    spool.append([_row(3)])
    spool.stored(3, nothing_waits=False)
    assert [line["input"] for line in _lines(spool.path)] == [0]  # nothing written on the event loop
    held.set()
    await _settled(spool)
    assert [line.get("input", line.get("stored")) for line in _lines(spool.path)] == [0, 1, 2, 3, 3]
    spool.stored(1, nothing_waits=True)
    spool.append([_row(4)])
    await _settled(spool)
    assert [line["input"] for line in _lines(spool.path)] == [4]
    await asyncio.to_thread(spool.close, nothing_waits=False)
    assert [line["input"] for line in _lines(spool.path)] == [4]  # waiting: kept for the next start
    assert [[r.input for r in rows] for _, rows in UsageSpool(tmp_path / "spool").recover()] == [[4]]


async def test_close_writes_what_waits_and_removes_an_empty_spool(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path / "spool")
    spool.append([_row(1)])
    spool.stored(1, nothing_waits=True)
    await asyncio.to_thread(spool.close, nothing_waits=True)
    assert not spool.path.exists()
    unused = UsageSpool(tmp_path / "other")
    unused.stored(3, nothing_waits=True)
    await asyncio.to_thread(unused.close, nothing_waits=True)
    assert not (tmp_path / "other").exists()
