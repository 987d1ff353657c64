"""Attach the memory layer to a gateway: the L2 after-turn hook, the compactor, and the AutoCompact/L3 timers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agenthub.gateway.timers import Timer
from agenthub.memory.autocompact import AutoCompact
from agenthub.memory.consolidator import Consolidator
from agenthub.memory.processor import MemoryProcessor

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

AUTOCOMPACT_TIMER = "memory_autocompact"
L3_TIMER = "memory_l3"


@dataclass(frozen=True)
class MemoryLayer:
    consolidator: Consolidator
    autocompact: AutoCompact
    processor: MemoryProcessor
    autocompact_timer: Timer
    l3_timer: Timer


def attach_memory_layer(gateway: GatewayCore) -> MemoryLayer:
    """Wire everything (kept as `gateway.memory_layer`); the timers start and stop with the gateway."""
    memory = gateway.settings.memory
    processor = MemoryProcessor(gateway)
    consolidator = Consolidator(gateway, flush=processor.flush)
    gateway.compactor = consolidator
    gateway.after_turn_hooks.append(consolidator.after_turn)
    autocompact = AutoCompact(gateway, consolidator)
    gateway.memory_layer = MemoryLayer(
        consolidator,
        autocompact,
        processor,
        gateway.timers.add(AUTOCOMPACT_TIMER, memory.autocompact_interval_s, autocompact.tick),
        gateway.timers.add(L3_TIMER, memory.l3_interval_s, processor.tick),
    )
    return gateway.memory_layer
