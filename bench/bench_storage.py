"""Storage benchmarks: appends/s with the meta written behind vs written through, append cost vs history size,
load cost vs bare json.loads, memory of idle sessions."""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agenthub.clock import ManualClock
from agenthub.gateway.session_state import SessionRegistry
from agenthub.session.history import SessionHistory
from agenthub.session_keys import session_key
from agenthub.storage import jsonl
from agenthub.storage.meta import SessionMeta, write_meta

BIG = 10_000
SMALL = 10
APPENDS = 300


def _message(i: int) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {
        "role": role,
        "content": f"message {i}: " + "一段普通长度的对话内容 " * 8,
        "timestamp": 1_700_000_000_000 + i,
    }


async def bench_append(data_dir: Path, fsync: bool) -> tuple[float, float]:
    """Median seconds per append for a session holding SMALL vs BIG messages, interleaved in one run."""
    history = SessionHistory(data_dir, fsync=fsync)
    small, big = session_key("bench", "cli", f"small-{fsync}"), session_key("bench", "cli", f"big-{fsync}")
    for key, size in ((small, SMALL), (big, BIG)):
        jsonl.append_records(history.layout("bench").history_file(key), [_message(i) for i in range(size)])
        await history.append(key, _message(size))  # loads the cache and writes the meta once
    times: dict[str, list[float]] = {"small": [], "big": []}
    for i in range(APPENDS):
        for name, key in (("small", small), ("big", big)):
            start = time.perf_counter()
            await history.append(key, _message(i))
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["small"]), statistics.median(times["big"])


async def _written_through(history: SessionHistory, key: Any, message: dict[str, Any], meta: SessionMeta) -> None:
    """What an append cost before the meta was written behind: the JSONL append and the meta's atomic rewrite
    (temp file, rename) in one worker-thread hop, per append."""
    layout = history.layout(key.agent)

    def write() -> None:
        jsonl.append_records(layout.history_file(key), [message], fsync=True)
        write_meta(layout.meta_file(key), meta, durable=False)

    await asyncio.to_thread(write)


async def bench_append_rate(data_dir: Path, seconds: float = 3.0) -> tuple[float, float]:
    """Appends/s with fsync on, one session, alternating 0.5 s slices of written-through and written-behind meta
    (the same disk and load for both); returns (through, behind)."""
    history = SessionHistory(data_dir, fsync=True)
    key = session_key("bench", "cli", "rate")
    await history.append(key, _message(0))
    meta = await history.get_meta(key)
    assert meta is not None
    counts, spent = {"through": 0, "behind": 0}, {"through": 0.0, "behind": 0.0}
    i = 0
    while sum(spent.values()) < 2 * seconds:
        for mode in ("through", "behind"):
            start = time.perf_counter()
            while time.perf_counter() - start < 0.5:
                i += 1
                if mode == "through":
                    await _written_through(history, key, _message(i), meta.with_changes(updated_at=i))
                else:
                    await history.append(key, _message(i))
                counts[mode] += 1
            spent[mode] += time.perf_counter() - start
    await history.aclose()
    return counts["through"] / spent["through"], counts["behind"] / spent["behind"]


async def bench_load(data_dir: Path) -> tuple[float, float]:
    """Best-of-5 seconds: SessionHistory.load of a BIG session from disk vs reading + json.loads of its lines."""
    key = session_key("bench", "cli", "load")
    path = SessionHistory(data_dir).layout("bench").history_file(key)
    jsonl.append_records(path, [_message(i) for i in range(BIG)])
    ours, bare = [], []
    for _ in range(5):
        start = time.perf_counter()
        loaded = await SessionHistory(data_dir).load(key)  # a fresh instance: a cold cache, as after a restart
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        plain = [json.loads(line) for line in path.read_bytes().splitlines()]
        bare.append(time.perf_counter() - start)
        assert loaded == plain
    return min(ours), min(bare)


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def bench_memory(count: int = BIG) -> tuple[int, int]:
    """RSS growth for `count` idle SessionState objects (keys included) held by a SessionRegistry."""
    manager = SessionRegistry(ttl_s=3600.0)
    clock = ManualClock()
    gc.collect()
    before = _rss_bytes()
    for i in range(count):
        manager.touch(session_key("default", "wecom", f"user-{i:06d}"), clock())
    gc.collect()
    delta = _rss_bytes() - before
    assert len(manager) == count
    return delta, delta // count


async def main() -> None:
    delta, per = bench_memory()  # first, while the heap has no freed space to hide the growth in
    print(f"memory: {BIG} idle sessions RSS +{delta / 1024 / 1024:.1f} MiB, {per} bytes per session")
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        through, behind = await bench_append_rate(data_dir)
        print(
            f"appends/s (fsync on): meta written through {through:.0f}, written behind {behind:.0f}, "
            f"ratio {behind / through:.2f}"
        )
        for fsync in (False, True):
            small, big = await bench_append(data_dir, fsync)
            print(
                f"append (fsync={'on' if fsync else 'off'}): {SMALL} msgs {small * 1e6:.0f} us, "
                f"{BIG} msgs {big * 1e6:.0f} us, ratio {big / small:.2f}"
            )
        ours, bare = await bench_load(data_dir)
        print(
            f"load {BIG} msgs: SessionHistory {ours * 1e3:.1f} ms, bare json.loads {bare * 1e3:.1f} ms, "
            f"ratio {ours / bare:.2f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
