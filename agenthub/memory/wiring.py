"""Build the memory layer on a host: the compactor (L2 after each turn, on request, on overflow), AutoCompact and
L3, and the timers the host is to run for them (memory never schedules anything itself)."""

from __future__ import annotations

from dataclasses import dataclass

from agenthub.memory.autocompact import AutoCompact
from agenthub.memory.compaction import SessionCompactor
from agenthub.memory.host import MemoryHost, TimerSpec
from agenthub.memory.processor import MemoryProcessor

AUTOCOMPACT_TIMER = "memory_autocompact"
L3_TIMER = "memory_l3"


@dataclass(frozen=True)
class MemoryLayer:
    compactor: SessionCompactor
    autocompact: AutoCompact
    processor: MemoryProcessor
    timers: tuple[TimerSpec, ...]
    """What the host runs periodically: the AutoCompact sweep and the L3 run."""


def build_memory_layer(host: MemoryHost) -> MemoryLayer:
    """Every memory job on `host`; the caller plugs in `compactor.after_turn` and registers `timers`."""
    memory = host.settings.memory
    processor = MemoryProcessor(host)
    compactor = SessionCompactor(host, flush=processor.flush)
    autocompact = AutoCompact(host, compactor)
    timers = (
        TimerSpec(AUTOCOMPACT_TIMER, memory.autocompact_interval_s, autocompact.tick),
        TimerSpec(L3_TIMER, memory.l3_interval_s, processor.tick),
    )
    return MemoryLayer(compactor, autocompact, processor, timers)
