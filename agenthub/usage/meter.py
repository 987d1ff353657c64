"""`CpuMeter`: the CPU time the budget gate spends (its checks, reservations, settlements and lease bookkeeping),
kept as it runs, so that what budgets cost a turn can be read off directly (`bench/bench_budget.py`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class CpuMeter:
    """Sums the calling thread's CPU time (`time.thread_time`, about a microsecond per reading) over the sections it
    measures. A section that awaits also counts what other tasks of the loop ran meanwhile: an upper bound, close
    to the truth when turns run one at a time."""

    def __init__(self) -> None:
        self.seconds = 0.0
        """CPU seconds spent in measured sections since start."""
        self.sections = 0

    @contextmanager
    def measure(self) -> Iterator[None]:
        began = time.thread_time()
        try:
            yield
        finally:
            self.seconds += time.thread_time() - began
            self.sections += 1
