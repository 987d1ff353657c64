"""Redaction of one person's messages in a list of history records, keeping the turn structure and every other
person's records exactly as they were."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from agenthub.agent.conversion import SUMMARY_PREFIX
from agenthub.forget.scrub import QuoteMatcher
from agenthub.storage.meta import text_of

Message = dict[str, Any]

PROMPT_FIELDS = ("role", "timestamp", "channel", "together", "message_id")
"""What a redacted user message keeps besides its marker: where it sits in the turn structure, no content."""
REPLY_FIELDS = ("role", "timestamp")


@dataclass(frozen=True)
class Person:
    """Someone on one channel; `tag` is what stays of their id in redacted records and in the audit log."""

    channel: str
    sender_id: str

    def __post_init__(self) -> None:
        if not self.channel or not self.sender_id:
            raise ValueError("a person needs a channel and a sender id")

    @property
    def tag(self) -> str:
        digest = hashlib.sha256(f"{self.channel}\n{self.sender_id}".encode()).hexdigest()[:16]
        return f"forgotten-{digest}"

    def wrote(self, record: Message) -> bool:
        """True for a user message of theirs (also one redacted by an earlier run, so a rerun is a no-op)."""
        return (
            is_prompt(record)
            and record.get("sender_id") in (self.sender_id, self.tag)
            and record.get("channel", self.channel) == self.channel
        )


@dataclass(frozen=True)
class Markers:
    """The fixed texts that replace a redacted message and a redacted reply (in the chat's locale)."""

    message: str
    reply: str


@dataclass
class Redaction:
    records: list[Message]
    messages: int = 0
    replies: int = 0
    summaries: int = 0
    texts: list[str] = field(default_factory=list)
    """The person's own words that were removed: what memory lines quoting them are recognised by."""

    @property
    def changed(self) -> bool:
        return bool(self.messages or self.replies or self.summaries)


def is_prompt(record: Message) -> bool:
    """A message someone sent (not the tool results the agent loop stores as user messages)."""
    if record.get("role") != "user":
        return False
    content = record.get("content")
    if not isinstance(content, list):
        return True
    return not content or any(not (isinstance(b, dict) and b.get("type") == "tool_result") for b in content)


def is_summary(record: Message) -> bool:
    content = record.get("content")
    return record.get("role") == "system" and (
        record.get("kind") == "summary" or (isinstance(content, str) and content.startswith(SUMMARY_PREFIX))
    )


def involves(records: list[Message], person: Person) -> bool:
    return any(person.wrote(r) for r in records)


def their_texts(records: list[Message], person: Person) -> list[str]:
    """The text of each of their messages not redacted yet (what quotes of them are recognised by)."""
    return [text_of(r.get("content")) for r in records if person.wrote(r) and not r.get("redacted")]


def other_senders(records: list[Message], person: Person) -> set[str]:
    """Everyone else who wrote in these records (an empty set: a private chat with the person)."""
    return {str(r.get("sender_id", "")) for r in records if is_prompt(r) and not person.wrote(r)}


def redact(records: list[Message], person: Person, markers: Markers, *, drop_summaries: bool) -> Redaction:
    """The person's messages become the message marker and every record of the replies that answered them
    (assistant text, tool calls and their results, pairing kept) the reply marker. A message sent together with
    one of theirs shares the reply, so that reply goes too; the other person's message itself stays. Summaries
    are dropped when `drop_summaries` (a summary cannot be un-quoted without a model)."""
    result = Redaction(records=[])
    in_their_exchange = False
    for record in records:
        if is_summary(record) and drop_summaries:
            result.summaries += 1
            continue
        if is_prompt(record):
            theirs = person.wrote(record)
            in_their_exchange = theirs or (in_their_exchange and bool(record.get("together")))
            if theirs and not record.get("redacted"):
                result.texts.append(text_of(record.get("content")))
                result.records.append(_redacted_prompt(record, person, markers.message))
                result.messages += 1
                continue
        elif in_their_exchange and record.get("role") in ("assistant", "user") and not record.get("redacted"):
            result.records.append(_redacted_reply(record, markers.reply))
            result.replies += 1
            continue
        result.records.append(record)
    return result


def scrub_quotes(records: list[Message], matcher: QuoteMatcher, marker: str) -> tuple[list[Message], int]:
    """Other people's exchanges that quote the person (a quoted message, a reply repeating their words): each
    quoting line of a message's or a reply's text becomes `marker`, everything else stays as it was. Returns the
    records and how many lines were replaced."""
    if not matcher:
        return records, 0
    out: list[Message] = []
    replaced = 0
    for record in records:
        if record.get("redacted") or record.get("role") not in ("user", "assistant"):
            out.append(record)
            continue
        content, lines = _scrubbed_content(record.get("content"), matcher, marker)
        out.append({**record, "content": content} if lines else record)
        replaced += lines
    return out, replaced


def _scrubbed_content(content: Any, matcher: QuoteMatcher, marker: str) -> tuple[Any, int]:
    if isinstance(content, str):
        return matcher.replace(content, marker)
    if not isinstance(content, list):
        return content, 0
    blocks, replaced = [], 0
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            text, lines = matcher.replace(block["text"], marker)
            if lines:
                block, replaced = {**block, "text": text}, replaced + lines
        blocks.append(block)
    return blocks, replaced


def _redacted_prompt(record: Message, person: Person, marker: str) -> Message:
    kept = {k: record[k] for k in PROMPT_FIELDS if k in record}
    return {**kept, "content": marker, "sender_id": person.tag, "redacted": True}


def _redacted_reply(record: Message, marker: str) -> Message:
    kept = {k: record[k] for k in REPLY_FIELDS if k in record}
    return {**kept, "content": redacted_content(record.get("content"), marker), "redacted": True}


def redacted_content(content: Any, marker: str) -> str | list[dict[str, Any]]:
    """Text → the marker; a tool call keeps its id and name (input emptied), its result its `tool_use_id`, so
    every `tool_use` still has its `tool_result`; anything else (thinking, images) becomes the marker text."""
    if not isinstance(content, list):
        return marker
    blocks: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            blocks.append({"type": "tool_use", "id": block.get("id", ""), "name": block.get("name", ""), "input": {}})
        elif kind == "tool_result":
            result = {"type": "tool_result", "tool_use_id": block.get("tool_use_id", ""), "content": marker}
            blocks.append({**result, **({"is_error": True} if block.get("is_error") else {})})
        elif not blocks or blocks[-1] != {"type": "text", "text": marker}:
            blocks.append({"type": "text", "text": marker})
    return blocks or marker
