"""What a session's history already holds of messages accepted through the durable inbox (exactly once on resume)."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agenthub.messages import InboundMessage
from agenthub.storage.meta import text_of

INBOX_ID = "inbox_id"
"""The metadata key (and stored user record field) naming the inbox entry a message came in as."""
INBOX_SEQ = "inbox_seq"
"""The metadata key of the entry's acceptance sequence: the session's arrival order, across instances too."""
INBOX_SESSION = "inbox_session"
"""The metadata key of the session the entry was accepted under (absent: not known at acceptance)."""
INBOX_JUST_ACCEPTED = "inbox_just_accepted"
"""The metadata key set True by the submitter that accepted the entry a moment ago in this process (its first
submission: no history can hold it yet, so its turn looks nothing up); every other submission of an entry (a
resume after a restart, a takeover) sets it False, whatever the stored message carried."""

INBOX_ANSWERED_BY_STORING = "inbox_answered_by_storing"
"""The metadata key set True by the submitter when the entry is answered once its answer is stored (the HTTP API's
without an idempotency key, design §12): the append that stores the answer may settle it too."""


@dataclass(frozen=True)
class StoredMessage:
    """A message whose user record is in the history; `answer` is the text answered after it, None when the
    process died before its answer was stored."""

    answer: str | None
    joined: bool = False
    """A later message was sent together with it: that one carried the answer, this one ended "answered together"."""


def inbox_id_of(message: InboundMessage) -> str | None:
    value = message.metadata.get(INBOX_ID)
    return value if isinstance(value, str) and value else None


def may_be_stored(message: InboundMessage) -> bool:
    """Whether a history may already hold `message`'s user record: it came through the inbox and this is not the
    first submission of an entry just accepted here."""
    return inbox_id_of(message) is not None and message.metadata.get(INBOX_JUST_ACCEPTED) is not True


def answered_by_storing(message: InboundMessage) -> bool:
    """Whether the entry `message` came in as is answered once its answer is stored (`INBOX_ANSWERED_BY_STORING`)."""
    return message.metadata.get(INBOX_ANSWERED_BY_STORING) is True and inbox_id_of(message) is not None


def inbox_seq_of(message: InboundMessage) -> int | None:
    value = message.metadata.get(INBOX_SEQ)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def stored_messages(history: Sequence[dict[str, Any]], inbox_ids: Iterable[str]) -> dict[str, StoredMessage]:
    """For each of `inbox_ids` whose user record is in `history` (its last one): whether (and with what) it was
    answered. The records' ids are read at C speed: a fresh message, in no record, is looked for on every turn."""
    ids = list(map(_inbox_id, history))
    found: dict[str, StoredMessage] = {}
    for entry_id in dict.fromkeys(inbox_ids):
        end = len(ids)
        while entry_id in ids[:end]:
            index = end - 1 - ids[end - 1 :: -1].index(entry_id)
            if history[index].get("role") == "user":
                found[entry_id] = StoredMessage(_answer_after(history, index), _joined_by_next(history, index))
                break
            end = index
    return dict(sorted(found.items(), key=lambda item: ids.index(item[0])))


_inbox_id = operator.methodcaller("get", INBOX_ID)


def _answer_after(history: Sequence[dict[str, Any]], index: int) -> str | None:
    """The text of the assistant records after the user message at `index` (and the messages sent together with
    it), up to the next user message; None when there is none. A user message after an answer starts the next
    turn even when flagged `together` (a flag older versions wrote after an answer): answers never join."""
    texts: list[str] = []
    answered = False
    for record in history[index + 1 :]:
        if _starts_next_turn(record) or (answered and _is_user_message(record)):
            break
        if record.get("role") == "assistant":
            answered = True
            texts.append(text_of(record.get("content")))
    return "\n\n".join(t for t in texts if t) if answered else None


def _joined_by_next(history: Sequence[dict[str, Any]], index: int) -> bool:
    """Whether the next user message after `index` was sent together with it (before any answer)."""
    for record in history[index + 1 :]:
        if record.get("role") == "assistant":
            return False
        if record.get("role") == "user" and "channel" in record:
            return bool(record.get("together"))
    return False


def _starts_next_turn(record: dict[str, Any]) -> bool:
    """A user message of a later turn (not a tool result, not one sent together with the one before)."""
    return _is_user_message(record) and not record.get("together")


def _is_user_message(record: dict[str, Any]) -> bool:
    """A message a user sent (not a tool result)."""
    return record.get("role") == "user" and "channel" in record
