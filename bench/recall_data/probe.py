"""Asking the product's search: a question's hits as the sets of turn ids each hit shows (the hit's turn and the
turn before and after it in its session)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from agenthub.search.index import SearchScope
from agenthub.search.service import SearchService
from agenthub.search.tool import SearchInputError, parse_terms
from agenthub.storage.keys import SessionKey
from recall_data.model import Conversation
from recall_data.score import LIMIT, Outcome, first_rank
from recall_data.store import AGENT, key_of


class Probe(Protocol):
    name: str

    async def shown(self, conv: Conversation, key: SessionKey, query: str, limit: int) -> list[set[int]]:
        """The turn ids each hit shows, best hit first, for `query` asked in the chat `key`."""
        ...


def with_neighbours(conv: Conversation, gid: int | None) -> set[int]:
    if gid is None:
        return set()
    first, last = conv.turns[0].gid, conv.turns[-1].gid
    return {g for g in (gid - 1, gid, gid + 1) if first <= g <= last}


class KeywordProbe:
    """The grep-like `memory_search` (every whitespace-separated term must appear, newest first)."""

    name = "keyword (grep-like) memory_search"

    def __init__(self, service: SearchService) -> None:
        self.service = service

    async def shown(self, conv: Conversation, key: SessionKey, query: str, limit: int) -> list[set[int]]:
        try:
            terms = parse_terms(query)
        except SearchInputError:
            return []
        hits = await self.service.search(AGENT, terms, SearchScope(str(key)), limit)
        return [with_neighbours(conv, conv.turn_at(h.ts)) for h in hits]


async def evaluate(
    probe: Probe,
    conversations: Sequence[Conversation],
    *,
    keys: Callable[[Conversation], SessionKey] = key_of,
    limit: int = LIMIT,
) -> list[Outcome]:
    """Every question of `conversations`, as asked and as keywords, asked within its own chat (`keys`)."""
    outcomes = []
    for conv in conversations:
        for q in conv.questions:
            for form, query in (("asked", q.asked), ("keywords", q.keywords)):
                shown = await probe.shown(conv, keys(conv), query, limit)
                outcomes.append(Outcome(q, form, first_rank(shown, q.answers), first_rank(shown, q.stale)))
    return outcomes
