"""Scheduler: due-time lateness with 10,000 jobs, and idle CPU with 10,000 jobs against none.

Run from the repository root: `.venv/bin/python bench/bench_scheduler.py [--jobs 10000]`.
Lateness: the jobs are written to one agent's jobs.json (the restart path) and fire on the real clock over
`--spread` seconds, a fifth of them due at the very same second; each is late by the time from its due time to the
moment the scheduler hands it to delivery, after recording it durably (fsync on). Idle CPU: a daemon-like gateway
with the scheduler holding `--jobs` jobs due next year, against one holding none, each measured as process CPU
time over `--idle` seconds, three rounds alternated and the medians compared.
Targets: lateness p99 <= 1 s, idle CPU ratio <= 1.1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.hosting.app import build_services
from agenthub.log import configure_logging
from agenthub.scheduler.core import Scheduler
from agenthub.scheduler.jobs import Job
from agenthub.scheduler.store import JobStore
from agenthub.scheduler.wiring import start_scheduler, stop_scheduler
from tests.support.roots import make_settings

AGENT = "default"
YEAR_S = 365 * 86400.0
IDLE_ROUNDS = 3


def make_jobs(count: int, first_due: float, spread_s: float) -> list[Job]:
    """`count` one-off jobs over 500 chats: a fifth due at one instant mid-way, the rest spread evenly."""
    burst = count // 5
    jobs = []
    for i in range(count):
        due = first_due + spread_s / 2 if i < burst else first_due + spread_s * (i - burst) / max(1, count - burst)
        jobs.append(
            Job(
                id=f"j{i:05d}",
                agent=AGENT,
                channel="http",
                chat_id=f"c{i % 500}",
                timezone="Asia/Shanghai",
                created_at=time.time(),
                at=due,
                text=f"reminder {i}",
                next_due=due,
            )
        )
    return jobs


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure_lateness(root: Path, count: int, spread_s: float) -> list[float]:
    settings = make_settings(root / "lateness")
    store = JobStore(settings.data_dir)
    lead_s = 3.0  # loading 10,000 jobs happens before the first is due
    await store.save(AGENT, make_jobs(count, time.time() + lead_s, spread_s))
    scheduler = Scheduler(settings.scheduler, store)
    late: list[float] = []
    done = asyncio.Event()

    async def fire(job: Job, due: float) -> None:
        late.append(time.time() - due)
        if len(late) == count:
            done.set()

    await scheduler.start(fire)
    try:
        await asyncio.wait_for(done.wait(), lead_s + spread_s + 60)
    finally:
        await scheduler.stop()
    assert len(scheduler) == 0, "every one-off job is removed once recorded"
    return late


async def idle_cpu(root: Path, count: int, seconds: float) -> tuple[float, int]:
    """Process CPU seconds over `seconds` of idle daemon with `count` far-future jobs; and the jobs loaded."""
    settings = make_settings(root / f"idle{count}")
    if count:
        await JobStore(settings.data_dir).save(AGENT, make_jobs(count, time.time() + YEAR_S, 3600.0))
    async with build_services(settings) as services:
        await start_scheduler(services, [])
        assert services.scheduler is not None
        loaded = len(services.scheduler)
        await asyncio.sleep(1.0)  # past start-up
        gc.collect()
        started = time.process_time()
        await asyncio.sleep(seconds)
        used = time.process_time() - started
        await stop_scheduler(services)
    return used, loaded


async def main(count: int, spread_s: float, idle_s: float) -> int:
    configure_logging("warning", "console")
    with tempfile.TemporaryDirectory(prefix="bench-scheduler-") as tmp:
        root = Path(tmp)
        late = await measure_lateness(root, count, spread_s)
        nones, manys, loaded = [], [], 0
        for round_ in range(IDLE_ROUNDS):  # alternated, medians taken: the two quantities are tiny and noisy
            nones.append((await idle_cpu(root / str(round_), 0, idle_s))[0])
            used, loaded = await idle_cpu(root / str(round_), count, idle_s)
            manys.append(used)
        none_cpu, many_cpu = statistics.median(nones), statistics.median(manys)
    p50, p99, worst = percentile(late, 0.5), percentile(late, 0.99), max(late)
    ratio = many_cpu / none_cpu if none_cpu > 0 else float("inf")
    print(f"jobs fired: {len(late)} over {spread_s:.0f} s ({count // 5} due at the same second)")
    print(
        f"lateness: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {worst * 1000:.1f} ms, "
        f"mean {statistics.fmean(late) * 1000:.1f} ms (target p99 <= 1000 ms)"
    )
    print(
        f"idle CPU over {idle_s:.0f} s: no jobs {none_cpu * 1000:.1f} ms, {loaded} jobs {many_cpu * 1000:.1f} ms, "
        f"ratio {ratio:.2f} (target <= 1.1)"
    )
    ok = p99 <= 1.0 and ratio <= 1.1
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=20.0, help="seconds over which the jobs fall due")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of each idle CPU measurement")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.jobs, args.spread, args.idle)))
