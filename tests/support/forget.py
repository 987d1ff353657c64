"""Helpers for the /forget tests: a private-memory agent config and reading what stayed on disk."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web

from agenthub.forget.redact import Person

PRIVATE_CONFIG = {"memory": {"scope": "chat", "user_profile": "per_user"}}


def files_with(roots: list[Path], needle: str) -> list[str]:
    """Every file under `roots` whose bytes contain `needle` (the grep of the issue's must-show)."""
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and needle.encode() in path.read_bytes():
                found.append(str(path))
    return found


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


def others_exchanges(lines: list[bytes], person: str, channel: str = "wecom") -> list[bytes]:
    """The lines of every exchange that another person started (their message and the replies to it)."""
    kept, theirs = [], False
    for line in lines:
        record = json.loads(line)
        if record.get("role") == "user" and "sender_id" in record:
            theirs = record["sender_id"] not in (person, Person(channel, person).tag)
        if theirs and record.get("role") != "system":
            kept.append(line)
    return kept


def texts_holding(probe: str) -> Iterator[str]:
    """The types of the live objects that refer to a text (str, bytes, bytearray) longer than `probe` holding it,
    directly or through tuples the collector does not track (a tuple of texts and numbers is untracked)."""
    raw = probe.encode()

    def holds(held: object) -> bool:
        if isinstance(held, str):
            return len(held) > len(probe) and probe in held
        if isinstance(held, bytes | bytearray):
            return len(held) > len(raw) and raw in held
        return isinstance(held, tuple) and not gc.is_tracked(held) and any(map(holds, held))

    for holder in gc.get_objects():
        if isinstance(holder, web.Request):  # the fake model's server side of a call
            continue
        if any(map(holds, gc.get_referents(holder))):
            yield f"{type(holder).__module__}.{type(holder).__qualname__}"
