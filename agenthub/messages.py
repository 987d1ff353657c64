"""Normalised messages that cross between channels and the core, and the reply stream event types."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from agenthub.jsonsafe import without_lone_surrogates


def now_ms() -> int:
    """Milliseconds since the epoch, the timestamp unit of history lines."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Attachment:
    """Media a channel downloaded with a message (already bounded by `media.max_download_bytes`).

    `kind` "image" reaches the model as an image block, "file" is saved to the agent's inbox and the model is told
    where; voice arrives as the platform's transcript in `content`, never as an attachment.
    """

    kind: Literal["image", "file"]
    name: str
    mime_type: str
    data: bytes = field(repr=False)


SENDER_NAME = "sender_name"
"""`InboundMessage.metadata` key: the sender's display name, where their channel knows it (it names them to others,
e.g. in a group's budget refusal; without it, their id does). WeCom's and Feishu's message events carry ids only."""


@dataclass(frozen=True, slots=True)
class Route:
    """What names a message's session, known before the message is built: its channel and chat (a group, a
    member of it or a thread, as the channel scopes its sessions), the agent it is addressed to and the
    credential it came through (the bindings route by those). `GatewayCore.session_of` names the session from it,
    by the rule that routes the full message: `InboundMessage.route` is this record."""

    channel: str
    chat_id: str
    agent: str | None = None
    cred_id: str | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message a channel received; nothing SDK-shaped, platform extras go in `metadata`."""

    channel: str
    chat_id: str
    sender_id: str
    content: str
    message_id: str = ""
    agent: str | None = None
    cred_id: str | None = None
    model_hint: str | None = None
    provider_hint: str | None = None
    timestamp: int = field(default_factory=now_ms)
    metadata: dict[str, Any] = field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()

    def __post_init__(self) -> None:
        """A lone surrogate in the text becomes U+FFFD: kept, it would fail the turn's model call (the HTTP API
        refuses such a body; a channel's platform may still send one)."""
        object.__setattr__(self, "content", without_lone_surrogates(self.content))

    @property
    def route(self) -> Route:
        """What the gateway routes the message by (its session is named from this alone)."""
        return Route(self.channel, self.chat_id, self.agent, self.cred_id)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one model call or one whole turn."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """The prompt's real size: uncached + cache read + cache write."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        }


@dataclass(frozen=True, slots=True)
class DeltaEvent:
    """A piece of reply text as it streams."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """The agent started (`phase="start"`) or finished (`phase="end"`) a tool call."""

    name: str
    phase: Literal["start", "end"]
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class NoticeEvent:
    """Out-of-band information for the user (a queued message, a compaction, a fallback)."""

    text: str
    transient: bool = False
    """Only true while the reply is pending (e.g. "queued behind …"): a channel that shows nothing before the final
    answer drops it."""


@dataclass(frozen=True, slots=True)
class DoneEvent:
    """The turn finished; `full_text` is exactly what was stored as the reply."""

    full_text: str
    usage: Usage = field(default_factory=Usage)
    session_key: str = ""
    joined: bool = False
    """This message waited and was answered together with later ones: the answer ends a later message's handle
    (`full_text` is then only a short note). A channel that has shown nothing for it yet may stay silent."""
    answer: str = ""
    """When `joined`: the turn's answer (the newest message's `full_text`), for channels that answer every
    request on its own (HTTP); chat UIs show it once, under the newest message."""


class ErrorCode(StrEnum):
    """The `code` of a reply's error; the values are an HTTP contract (`{"error": {"code"}}`, SSE `error`)."""

    ERROR = "error"
    STOPPED = "stopped"
    RESTART = "restart"
    TIMEOUT = "timeout"
    SHUTDOWN = "shutdown"
    ABORTED = "aborted"
    QUEUE_FULL = "queue_full"
    LLM_ERROR = "llm_error"
    INTERNAL = "internal"
    INVALID_ID = "invalid_id"
    UNKNOWN_AGENT = "unknown_agent"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    PATH_REFUSED = "path_refused"
    UNREACHABLE = "unreachable"
    TRUNCATED = "truncated"
    BAD_STREAM = "bad_stream"
    MEDIA_REFUSED = "media_refused"
    LEASE_LOST = "lease_lost"
    BUDGET_EXCEEDED = "budget_exceeded"


USER_ABORTS = frozenset({ErrorCode.STOPPED, ErrorCode.RESTART})
"""The error codes of a reply its chat ended on purpose (/stop, /restart): no failure, no notice."""


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """The turn failed or was aborted; `message` is safe to show to the user."""

    message: str
    code: str = "error"


ReplyEvent = DeltaEvent | ToolEvent | NoticeEvent | DoneEvent | ErrorEvent
"""Everything a reply handle yields. A handle always ends with exactly one `DoneEvent` or `ErrorEvent`."""


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A message the core asks a channel to deliver proactively (a reminder, "back online")."""

    channel: str
    chat_id: str
    content: str
    reply_to: str | None = None
    cred_id: str | None = None
    event: ReplyEvent | None = None
    agent: str | None = None
    """The agent whose session the message belongs to (the HTTP channel's events feed is per agent)."""
