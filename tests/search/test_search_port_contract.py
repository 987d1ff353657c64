"""The SearchPort contract on every backend's `Stores`: the searcher built over the index the backend keeps finds
what its session store holds, and a forget purge leaves no removed text findable."""

from __future__ import annotations

import time

from agenthub.search.kits import SEARCHERS
from agenthub.session_keys import session_key
from agenthub.storage.search_index import SearchScope
from agenthub.storage.stores import Stores

KEY = session_key("default", "http", "alice")


def _record(role: str, text: str) -> dict[str, object]:
    return {"role": role, "content": text, "timestamp": int(time.time() * 1000), "sender_id": "alice"}


async def test_the_backends_searcher_finds_what_its_session_store_holds(backend_stores: Stores) -> None:
    await backend_stores.sessions.append(
        KEY, [_record("user", "my cat is called Pumpernickel"), _record("assistant", "ok")]
    )
    searcher = backend_stores.search.open(SEARCHERS)
    try:
        hits = await searcher.search("default", "Pumpernickel", SearchScope(session=str(KEY)), 5)
        assert [h.passage.text for h in hits] == ["my cat is called Pumpernickel"]
        assert await searcher.search("default", "nothing-like-it", SearchScope(session=str(KEY)), 5) == []
    finally:
        await searcher.close()


async def test_a_purge_after_a_redaction_leaves_the_old_text_unfindable(backend_stores: Stores) -> None:
    await backend_stores.sessions.append(KEY, [_record("user", "secret word Zanzibar")])
    searcher = backend_stores.search.open(SEARCHERS)
    try:
        scope = SearchScope(session=str(KEY))
        assert len(await searcher.search("default", "Zanzibar", scope, 5)) == 1
        await backend_stores.sessions.replace(KEY, [_record("user", "[redacted]")], archive=[])
        assert await searcher.purge("default", [KEY]) == 1
        assert await searcher.search("default", "Zanzibar", scope, 5) == []
    finally:
        await searcher.close()


async def test_a_message_holding_nul_is_indexed_and_found(backend_stores: Stores) -> None:
    """The HTTP API and the channels accept NUL in a message (JSON's \\u0000), which a PostgreSQL text column
    refuses: such a message is indexed with U+FFFD in its place on every backend, and the messages after it are
    indexed too (its refused index update stopped the agent's index)."""
    await backend_stores.sessions.append(KEY, [_record("user", "空字符\u0000 Quetzalcoatl \x07 and more")])
    await backend_stores.sessions.append(KEY, [_record("user", "next one mentions Tlaloc")])
    searcher = backend_stores.search.open(SEARCHERS)
    try:
        scope = SearchScope(session=str(KEY))
        hits = await searcher.search("default", "Quetzalcoatl", scope, 5)
        assert [h.passage.text for h in hits] == ["空字符\ufffd Quetzalcoatl \x07 and more"]
        assert len(await searcher.search("default", "Tlaloc", scope, 5)) == 1
    finally:
        await searcher.close()
