"""The one factory and parser of `agent:channel:chat_id` session keys, and the key → file name mapping."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote

from agenthub.errors import InvalidIdError

MAX_PART_CHARS = 128
KEPT_PARTS = 8192
"""How many recently checked key parts (and escaped keys) are remembered, so a session's next message is not
checked character by character again."""
MAX_STEM_BYTES = 200  # leaves room for ".meta.json" under the usual 255-byte file name limit
_DRIVE = re.compile(r"^[A-Za-z]:")
_SAFE_FILE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
_DECODE_ROUNDS = 4


def _decoded_forms(value: str) -> list[str]:
    """The value and its successive URL-decodings, so double-encoded traversal is caught too."""
    forms = [value]
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote(forms[-1])
        if decoded == forms[-1]:
            break
        forms.append(decoded)
    return forms


def _problem(form: str, *, allow_colon: bool) -> str | None:
    if "/" in form or "\\" in form:
        return "contains a path separator"
    if ".." in form:
        return "contains '..'"
    if _DRIVE.match(form):
        return "looks like a drive letter"
    if not allow_colon and ":" in form:
        return "contains ':'"
    for ch in form:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return "contains a control character"
    return None


def validate_part(name: str, value: str, *, allow_colon: bool = False) -> str:
    """Return `value` if it is acceptable as the `name` part of a key, else raise `InvalidIdError`."""
    if not isinstance(value, str) or not value:
        raise InvalidIdError(f"{name} must be a non-empty string")
    if len(value) > MAX_PART_CHARS:
        raise InvalidIdError(f"{name} is longer than {MAX_PART_CHARS} characters")
    problem = _part_problem(value, allow_colon)
    if problem is not None:
        raise InvalidIdError(f"{name} {problem}")
    return value


@functools.lru_cache(maxsize=KEPT_PARTS)
def _part_problem(value: str, allow_colon: bool) -> str | None:
    """What makes `value` (at most `MAX_PART_CHARS`) no key part, None when nothing does; kept for the parts
    seen most recently, since every message names its session's parts again."""
    if value != value.strip():
        return "must not start or end with whitespace"
    for form in _decoded_forms(value):
        problem = _problem(form, allow_colon=allow_colon)
        if problem is not None:
            return problem
    return None


def validate_agent_name(agent: str) -> str:
    """Agent names are also directory names: the key rules, no ':', and no leading '.' (`.`, hidden dirs)."""
    validate_part("agent", agent)
    if agent.startswith("."):
        raise InvalidIdError("agent must not start with '.'")
    return agent


@functools.lru_cache(maxsize=KEPT_PARTS)
def _escape(text: str) -> str:
    out = []
    for ch in text:
        if ch == ":":
            out.append("_")
        elif ch in _SAFE_FILE_CHARS or (ord(ch) > 127 and ch.isalnum()):
            out.append(ch)
        else:
            out.append("".join(f"~{b:02x}" for b in ch.encode("utf-8")))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A validated `agent:channel:chat_id`; build it with `session_key()` or `SessionKey.parse()`."""

    agent: str
    channel: str
    chat_id: str

    def __post_init__(self) -> None:
        validate_agent_name(self.agent)
        validate_part("channel", self.channel)
        validate_part("chat_id", self.chat_id, allow_colon=True)
        if len(self.file_stem.encode("utf-8")) > MAX_STEM_BYTES:
            raise InvalidIdError("chat_id is too long for a file name")

    def __str__(self) -> str:
        return f"{self.agent}:{self.channel}:{self.chat_id}"

    @classmethod
    def parse(cls, text: str) -> SessionKey:
        """Parse `agent:channel:chat_id` (the chat id may itself contain ':')."""
        parts = text.split(":", 2)
        if len(parts) != 3:
            raise InvalidIdError("a session key has the form agent:channel:chat_id")
        return cls(*parts)

    @property
    def file_stem(self) -> str:
        """The history file's name without suffix: ':' → '_', everything unsafe escaped as ~hh (one-to-one)."""
        return _escape(str(self))


def session_key(agent: str, channel: str, chat_id: str) -> SessionKey:
    """The only way to build a key from loose parts; raises `InvalidIdError` on traversal material."""
    return SessionKey(agent, channel, chat_id)


PERSON_DIGEST_PREFIX = "~sha256-"
"""Starts the person part of a sender id the key rules refuse (`person_key`)."""


def sender_problem(sender_id: str) -> str | None:
    """What makes `sender_id` unstorable (NUL: PostgreSQL keeps no NUL in a text, nor reads it back from JSON;
    a lone surrogate: no UTF-8), None when nothing does. Anything else is stored as it is."""
    if "\x00" in sender_id:
        return "contains NUL"
    try:
        sender_id.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode"
    return None


def validate_sender(sender_id: str) -> str:
    """Return `sender_id` if a person can be named by it (non-empty, `sender_problem`), else `InvalidIdError`."""
    problem = sender_problem(sender_id) if sender_id else "must be a non-empty string"
    if problem is not None:
        raise InvalidIdError(f"sender_id {problem}")
    return sender_id


def person_key(agent: str, channel: str, sender_id: str) -> SessionKey:
    """The key naming `sender_id`'s profiles on `channel` with `agent`: the sender id itself when the key rules
    accept it (every name on disk stays), else a stable digest of it, so an id with a backslash, a control
    character or '..' (which a platform may send) names a safe file instead of failing the turn. An id that itself
    starts with `PERSON_DIGEST_PREFIX` is named by its digest too: no ordinary id can name another person's
    digest-named profiles."""
    if not sender_id.startswith(PERSON_DIGEST_PREFIX):
        with contextlib.suppress(InvalidIdError):
            return session_key(agent, channel, sender_id)
    validate_agent_name(agent)
    validate_part("channel", channel)
    validate_sender(sender_id)
    digest = hashlib.sha256(sender_id.encode("utf-8")).hexdigest()[:32]
    return session_key(agent, channel, PERSON_DIGEST_PREFIX + digest)


def key_from_file_stem(stem: str) -> SessionKey | None:
    """Invert `file_stem` for listings; None if the name was not made by this mapping."""
    raw = bytearray()
    i = 0
    while i < len(stem):
        ch = stem[i]
        if ch == "~":
            try:
                raw += bytes([int(stem[i + 1 : i + 3], 16)])
            except ValueError:
                return None
            i += 3
            continue
        raw += (":" if ch == "_" else ch).encode("utf-8")
        i += 1
    try:
        key = SessionKey.parse(raw.decode("utf-8"))
    except (UnicodeDecodeError, InvalidIdError):
        return None
    return key if key.file_stem == stem else None
