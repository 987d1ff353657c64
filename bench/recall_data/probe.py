"""Asking the product's search: a question's hits as the sets of turn ids each hit shows (the hit's turn and the
turn before and after it in its session)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from agenthub.session_keys import SessionKey
from agenthub.storage.search_index import Passage, SearchHit, SearchScope
from recall_data.model import Conversation
from recall_data.score import LIMIT, Outcome, first_rank
from recall_data.store import AGENT, key_of


class Probe(Protocol):
    name: str

    async def shown(self, conv: Conversation, key: SessionKey, query: str, limit: int) -> list[set[int]]:
        """The turn ids each hit shows, best hit first, for `query` asked in the chat `key`."""
        ...


class Searches(Protocol):
    """What the bench asks of the product's search (the files' SearchService, or the database's shared one)."""

    async def search(self, agent: str, query: str, scope: SearchScope, limit: int) -> list[SearchHit]: ...


class RankedProbe:
    """`memory_search`'s ranked search, asked the question (or keywords) as is: each hit shows its turn and the turn
    before and after it in the same source, as the tool does."""

    name = "ranked memory_search"

    def __init__(self, service: Searches, *, everywhere: bool = False) -> None:
        self.service = service
        self.everywhere = everywhere
        """Search every chat of the agent (as an agent-scoped chat does), not only the question's own."""

    async def shown(self, conv: Conversation, key: SessionKey, query: str, limit: int) -> list[set[int]]:
        scope = SearchScope(None, agent_scoped=lambda _: True) if self.everywhere else SearchScope(str(key))
        hits = await self.service.search(AGENT, query, scope, limit)
        return [_turns(conv, (h.passage, h.before, h.after)) for h in hits]


def _turns(conv: Conversation, passages: Iterable[Passage | None]) -> set[int]:
    """The turns of `conv` among these passages (a summary or a memory line is none)."""
    found = (conv.turn_at(p.ts) for p in passages if p is not None and p.role == "user")
    return {gid for gid in found if gid is not None}


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
