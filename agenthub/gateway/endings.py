"""How a queued or finished turn's handles end: the answer to the newest message, a short done or the same error
to the messages joined with it, an error to a turn that never ran."""

from __future__ import annotations

from agenthub import i18n
from agenthub.gateway.runner import PendingTurn
from agenthub.gateway.turn import TurnOutcome, abort_message
from agenthub.messages import DoneEvent, ErrorEvent


def end_with(pending: PendingTurn, outcome: TurnOutcome) -> None:
    """The newest message's handle gets the turn's answer; the others of a joined turn end with a short done
    (the answer went out once, below them) or with the same error."""
    final = outcome.final
    if final is None:
        return
    for earlier in pending.joined:
        if not isinstance(final, DoneEvent):
            earlier.handle.emit(final)
            continue
        note = i18n.text("done.answered_together", earlier.locale)
        earlier.handle.emit(DoneEvent(note, session_key=final.session_key, joined=True, answer=final.full_text))
    pending.handle.emit(final)


def end_unanswered(pending: PendingTurn, reason: str) -> None:
    """A turn cancelled before it could run (or before its task took a step) still ends its handles."""
    for member in pending.members:
        if not member.handle.finished:
            member.handle.emit(ErrorEvent(abort_message(reason, member.locale, member.message), code=reason))
