"""What a turn uses beside the gateway's routing and queues, fixed when the gateway is built: `TurnServices`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agenthub.agent.definition import AgentDefinition
    from agenthub.session_keys import SessionKey
    from agenthub.storage.ports import Inbox
    from agenthub.usage.wiring import UsageServices


class Compactor(Protocol):
    """The memory layer's manual compaction, plugged in by the composition root; its answer is in `locale` (the
    asking chat's, with the language its caller chose), else in the chat's configured one."""

    async def compact(
        self,
        key: SessionKey,
        agent: AgentDefinition,
        *,
        reason: str,
        actor: str,
        focus: str = "",
        locale: str | None = None,
    ) -> str: ...


@dataclass(frozen=True)
class TurnServices:
    """The features a turn reaches, given to the gateway at construction and handed to its turns; None: off."""

    inbox: Inbox | None = None
    """The durable inbox the channels and the API store into: the arrival order and the ownership of a turn's
    messages are read from it (None: messages are not stored before they run)."""
    usage: UsageServices | None = None
    """Usage records and budgets: the turn's admission, and the recorder closed with the gateway."""
    compactor: Compactor | None = None
    """The turn's overflow compaction and `/compact`: the memory layer's."""
