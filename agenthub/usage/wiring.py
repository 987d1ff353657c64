"""Plugging usage into the gateway: the recorder on the providers' call log, the budget gate, `/usage`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from agenthub.clock import Clock
from agenthub.config import Settings
from agenthub.gateway.commands import CommandTier
from agenthub.storage.ports import UsageStore
from agenthub.storage.usage import FileUsageStore
from agenthub.usage.command import UsageCommand
from agenthub.usage.gate import BudgetGate
from agenthub.usage.recorder import UsageRecorder
from agenthub.usage.spool import SPOOL_DIR, UsageSpool

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore


@dataclass
class UsageServices:
    """What the usage views need: the store, the recorder, the gate, the zone days are counted in, the clock."""

    settings: Settings
    store: UsageStore
    recorder: UsageRecorder
    gate: BudgetGate
    zone: ZoneInfo
    clock: Clock


def attach_usage(gateway: GatewayCore, store: UsageStore | None = None) -> UsageServices:
    """Record every model call of the gateway's providers in `store` (default: `data/usage/`), check budgets
    before turns, and register `/usage`."""
    settings = gateway.settings
    store = store if store is not None else FileUsageStore(settings.data_dir)
    zone = ZoneInfo(settings.scheduler.timezone)
    recorder = UsageRecorder(store, zone, gateway.clock, UsageSpool(settings.data_dir / SPOOL_DIR))
    recorder.recover()  # what a killed process of this data directory had not stored yet
    gateway.providers.call_log.watch(recorder.watch)
    gate = BudgetGate(settings.budgets, store, recorder, zone, gateway.clock)
    services = gateway.usage = UsageServices(settings, store, recorder, gate, zone, gateway.clock)
    command = UsageCommand(services)
    gateway.commands.register(command.name, command.help_key, command, tier=CommandTier.PRIORITY)
    return services
