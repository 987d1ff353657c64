"""Usage for the gateway: the recorder on the providers' call log and the budget gate its turns are given, and
`/usage`."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from agenthub.clock import Clock
from agenthub.config import Settings
from agenthub.gateway.commands import CommandRouter, CommandTier
from agenthub.llm.calllog import CallLog
from agenthub.storage.ports import UsageStore
from agenthub.storage.usage_files import FileUsageStore
from agenthub.storage.writer_thread import WriterThread
from agenthub.usage.command import UsageCommand
from agenthub.usage.gate import BudgetGate
from agenthub.usage.recorder import UsageRecorder
from agenthub.usage.spool import SPOOL_DIR, UsageSpool


@dataclass
class UsageServices:
    """What the usage views need: the store, the recorder, the gate, the zone days are counted in, the clock."""

    settings: Settings
    store: UsageStore
    recorder: UsageRecorder
    gate: BudgetGate
    zone: ZoneInfo
    clock: Clock


def build_usage(
    settings: Settings,
    clock: Clock,
    call_log: CallLog,
    store: UsageStore | None = None,
    *,
    spool_thread: WriterThread | None = None,
) -> UsageServices:
    """Record every model call of the providers' `call_log` in `store` (default: `data/usage/`) and check budgets
    before turns: the gateway's turns are given what this returns when it is built. `spool_thread`: the history
    writer's thread on the files backend, so a call's rows reach the spool before the turn's answer its history."""
    store = store if store is not None else FileUsageStore(settings.data_dir)
    zone = ZoneInfo(settings.scheduler.timezone)
    recorder = UsageRecorder(store, zone, clock, UsageSpool(settings.data_dir / SPOOL_DIR, spool_thread))
    recorder.recover()  # what a killed process of this data directory had not stored yet
    call_log.watch(recorder.watch)
    gate = BudgetGate(settings.budgets, store, recorder, zone, clock)
    return UsageServices(settings, store, recorder, gate, zone, clock)


def register_usage_command(commands: CommandRouter, services: UsageServices) -> None:
    """`/usage`, a priority command (registered last: the end of /help)."""
    command = UsageCommand(services)
    commands.register(command.name, command.help_key, command, tier=CommandTier.PRIORITY)
