"""`CpuMeter`: the CPU time the budget gate spends (its checks, reservations, settlements and lease bookkeeping),
kept as it runs, so that what budgets cost a turn can be read off directly (`bench/bench_budget.py`)."""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class CpuMeter:
    """Sums the calling thread's CPU time (`time.thread_time`, about a microsecond per reading) over the sections it
    measures: `measure()` a section that does not await, `run()` a coroutine, of which only its own steps count
    (what other tasks of the loop run while it waits is theirs)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        """CPU seconds spent in measured sections since start."""
        self.sections = 0

    def measure(self) -> _Section:
        """A section that does not await (`with meter.measure(): ...`)."""
        return _Section(self)

    def apart(self) -> CpuMeter:
        """A meter of its own, for CPU that counts as this one's only in some cases (`charge` it then)."""
        return CpuMeter()

    def charge(self, other: CpuMeter) -> None:
        """Count what `other` measured as this meter's too."""
        self.seconds += other.seconds
        self.sections += other.sections

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro`, counting the CPU time of each of its steps (from a resumption to its next wait)."""
        self.sections += 1
        result: T = await _Stepped(coro, self)
        return result


class _Section:
    __slots__ = ("_began", "_meter")

    def __init__(self, meter: CpuMeter) -> None:
        self._meter = meter
        self._began = 0.0

    def __enter__(self) -> None:
        self._began = time.thread_time()

    def __exit__(self, *exc: object) -> None:
        self._meter.seconds += time.thread_time() - self._began
        self._meter.sections += 1


class _Stepped:
    """Drives a coroutine step by step for the task awaiting it, reading the thread's CPU time around each step:
    what it waits for, and what runs meanwhile, is not counted. A cancellation (or an error) thrown into the task
    goes on into the coroutine."""

    __slots__ = ("_coro", "_meter")

    def __init__(self, coro: Coroutine[Any, Any, Any], meter: CpuMeter) -> None:
        self._coro = coro
        self._meter = meter

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, meter = self._coro, self._meter
        value: Any = None
        thrown: BaseException | None = None
        while True:
            began = time.thread_time()
            try:
                step = coro.send(value) if thrown is None else coro.throw(thrown)
            except StopIteration as done:
                return done.value
            finally:
                meter.seconds += time.thread_time() - began
            try:
                value, thrown = (yield step), None
            except GeneratorExit:  # the awaiting task is gone: so is the coroutine
                coro.close()
                raise
            except BaseException as e:  # passed on, never swallowed: the coroutine sees it where it waits
                value, thrown = None, e
