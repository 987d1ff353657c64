"""Results derived from objects that are never changed in place (a request's messages, system blocks and tool
definitions), kept by the object's identity: what a chat's next call repeats is not derived again."""

from __future__ import annotations

import operator
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
V = TypeVar("V")


class ByIdentity(Generic[T, V]):
    """`derive(obj)` kept for the `size` most recently used objects, by identity (each held, so its id cannot be
    reused by another object while its result is kept)."""

    def __init__(self, derive: Callable[[T], V], size: int = 64) -> None:
        self._derive = derive
        self._size = size
        self._items: OrderedDict[int, tuple[T, V]] = OrderedDict()
        _KEPT.add(self)

    def clear(self) -> None:
        self._items.clear()

    def __call__(self, obj: T) -> V:
        hit = self._items.get(id(obj))
        if hit is not None and hit[0] is obj:
            self._items.move_to_end(id(obj))
            return hit[1]
        value = self._derive(obj)
        self._items[id(obj)] = (obj, value)
        while len(self._items) > self._size:
            self._items.popitem(last=False)
        return value


class Repeated(Generic[T, V]):
    """`[derive(item) for item in items]` over a list that mostly repeats the previous one (a chat's messages, call
    after call): the previous call's items (held) are matched by identity, the common prefix at C speed, and only
    what it did not have is derived. `kept`: how many leading results the last call carried over in place (the
    same as the call before at the same positions), for state a subclass keeps over the results."""

    __slots__ = ("_derive", "items", "kept", "results")

    def __init__(self, derive: Callable[[T], V]) -> None:
        self._derive = derive
        self.items: list[T] = []
        self.results: list[V] = []
        self.kept = 0

    def __call__(self, items: list[T]) -> list[V]:
        before, results = self.items, self.results
        same = list(map(operator.is_, items, before))
        kept = same.index(False) if False in same else len(same)
        seen = {id(item): (item, result) for item, result in zip(before[kept:], results[kept:], strict=True)}
        derived = results[:kept]
        for item in items[kept:]:
            hit = seen.get(id(item))
            derived.append(hit[1] if hit is not None and hit[0] is item else self._derive(item))
        self.items, self.results, self.kept = list(items), derived, kept
        return derived


class PerChat(Generic[V]):
    """One value per chat for the `size` chats used most recently (`make()` for a chat not kept). Every one made
    is dropped for a chat by `drop_chat` (what it keeps is derived from the chat's messages)."""

    def __init__(self, make: Callable[[], V], size: int = 128) -> None:
        self._make = make
        self._size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        _PER_CHAT.add(self)
        _KEPT.add(self)

    def drop(self, chat: Hashable) -> None:
        self._items.pop(chat, None)

    def clear(self) -> None:
        self._items.clear()

    def __call__(self, chat: Hashable) -> V:
        value = self._items.pop(chat, None)
        if value is None:
            value = self._make()
        self._items[chat] = value
        while len(self._items) > self._size:
            self._items.popitem(last=False)
        return value


_PER_CHAT: weakref.WeakSet[PerChat[Any]] = weakref.WeakSet()
_KEPT: weakref.WeakSet[ByIdentity[Any, Any] | PerChat[Any]] = weakref.WeakSet()


def drop_chat(chat: Hashable) -> None:
    """Every `PerChat` forgets `chat`: after a history replace (a forget's redaction, a compaction), clear or
    delete, nothing derived from messages the history no longer holds stays in memory (the next call derives
    afresh)."""
    for kept in list(_PER_CHAT):
        kept.drop(chat)


def drop_everything() -> None:
    """Every `ByIdentity` and `PerChat` empties (a forget: the system blocks a profile or memory file made, and
    their encodings and digests, are held by identity; the next calls derive afresh, the same bytes)."""
    for kept in list(_KEPT):
        kept.clear()
