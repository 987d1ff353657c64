"""History appends under concurrency, fsync on: N sessions each appending one turn after another (the shape of N
HTTP clients), through `SessionHistory` on a real data directory. Prints appends/s and the process's CPU per append
(all threads). Run: `.venv/bin/python bench/bench_group_commit.py` (PYTHONPATH=<other checkout> for the old code)."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from agenthub.session.history import SessionHistory
from agenthub.session_keys import session_key


async def _one_session(history: SessionHistory, chat: str, turns: int) -> None:
    key = session_key("default", "http", chat)
    for n in range(turns):
        await history.append(key, {"role": "user", "content": f"{chat} message {n} " + "x" * 200})
        await history.append(key, {"role": "assistant", "content": [{"type": "text", "text": "answer " * 30}]})


async def run(data_dir: Path, sessions: int, turns: int) -> tuple[float, float, object]:
    history = SessionHistory(data_dir, fsync=True)
    await _one_session(history, "warm", 1)
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(_one_session(history, f"c{s}", turns) for s in range(sessions)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await history.aclose()
    appends = sessions * turns * 2
    batches = getattr(getattr(history.store, "writer", None), "batches", "n/a")  # the old code: one fsync per append
    return appends / wall, cpu / appends * 1000, batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:  # the disk under test, not a tmpfs /tmp
        rate, cpu_ms, batches = asyncio.run(run(Path(tmp), args.sessions, args.turns))
    print(
        f"{args.sessions} sessions x {args.turns} turns: {rate:8.1f} appends/s  cpu {cpu_ms:.3f} ms/append"
        f"  batches {batches}"
    )


if __name__ == "__main__":
    main()
