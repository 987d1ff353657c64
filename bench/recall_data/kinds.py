"""What a planted fact looks like: its slots, how its owner says it, restates or changes it, and how it is asked."""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

Values = Sequence[str] | Callable[[random.Random], str]


@dataclass(frozen=True)
class FactKind:
    """Templates use `{name}` (the fact's owner), `{other}` (the other speaker), the slots, and in `changes`
    `{was}` (the old value of the `changing` slot)."""

    key: str
    slots: Mapping[str, Values]
    says: tuple[str, ...]  # the owner states it
    asks: tuple[str, ...]  # a person asks about it
    keywords: tuple[str, ...]  # what a model would search for
    leads: tuple[tuple[str, str], ...] = ()  # (the other asks, the owner answers with the fact)
    restates: tuple[str, ...] = ()  # the owner mentions it again later
    changing: str = ""  # the slot a later turn changes
    changes: tuple[str, ...] = ()
    asks_now: tuple[str, ...] = ()  # asked after a change (the current value)
    replies: tuple[str, ...] = ()  # the other's reaction
    distractors: tuple[str, ...] = ()  # small talk on the same topic without the fact


def fill(rng: random.Random, values: Values) -> str:
    return values(rng) if callable(values) else rng.choice(list(values))


def code(pattern: str) -> Callable[[random.Random], str]:
    """A generator of identifiers: in `pattern`, `9` is a digit, `^` an upper-case letter, `~` a lower-case one."""

    def make(rng: random.Random) -> str:
        out = []
        for ch in pattern:
            if ch == "9":
                out.append(rng.choice(string.digits))
            elif ch == "^":
                out.append(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ"))
            elif ch == "~":
                out.append(rng.choice("abcdefghjkmnpqrstuvwxyz"))
            else:
                out.append(ch)
        return "".join(out)

    return make


def one_of(*makers: Callable[[random.Random], str]) -> Callable[[random.Random], str]:
    return lambda rng: rng.choice(makers)(rng)


def kind(key: str, slots: Mapping[str, Values], **parts: object) -> FactKind:
    """A FactKind whose template lists may be given as lists."""
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in parts.items()}
    return FactKind(key, slots, **fields)  # type: ignore[arg-type]
