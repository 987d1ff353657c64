"""Time-aware recall on every backend: a question naming a window ("two weeks ago", 上个月) finds what was said in it
first, counted from the chat's newest message (not the clock); "when did I first…" finds the earliest of the turns
on its topic, "most recently" the newest; and the scope's newest message is what the index says it is."""

from __future__ import annotations

from agenthub.search import rerank
from agenthub.search.kits import SEARCHERS
from agenthub.search.service import SearchService
from agenthub.search.shared import SharedSearchService
from agenthub.search.when import DAY_MS
from agenthub.session_keys import session_key
from agenthub.storage.search_index import SearchScope
from agenthub.storage.stores import Stores

KEY = session_key("default", "wecom", "garden-chat")
OTHER = session_key("default", "wecom", "other-chat")
NOW = 1_780_000_000_000  # 2026-05-28: long past by the clock, the chat's own now is what counts
SAID = [
    (40, "I'm planning a garden pond for the frogs, still measuring"),
    (14, "The garden pond is dug, lined it with clay at the weekend"),
    (6, "Bread is rising, weather is grey"),
    (2, "The garden pond froze over last night, the frogs are fine"),
    (0, "Good night, talk tomorrow"),
]


def _records(said: list[tuple[int, str]], now: int) -> list[dict[str, object]]:
    return [
        {"role": "user", "content": text, "timestamp": now - days * DAY_MS, "sender_id": "mia"} for days, text in said
    ]


async def _first_texts(stores: Stores, question: str) -> list[str]:
    searcher = stores.search.open(SEARCHERS)
    try:
        hits = await searcher.search("default", question, SearchScope(session=str(KEY)), 3)
    finally:
        await searcher.close()
    return [h.passage.text for h in hits]


async def _stored(stores: Stores) -> Stores:
    await stores.sessions.append(KEY, _records(SAID, NOW))
    await stores.sessions.append(OTHER, _records([(0, "garden pond")], NOW + 90 * DAY_MS))  # another chat's now
    return stores


async def test_a_window_from_the_chats_now_finds_what_was_said_in_it_first(backend_stores: Stores) -> None:
    stores = await _stored(backend_stores)
    assert (await _first_texts(stores, "What did Mia say about the garden pond two weeks ago?"))[0] == SAID[1][1]
    assert (await _first_texts(stores, "Mia上个月说花园池塘怎么了？ garden pond"))[0] == SAID[0][1]


async def test_without_the_time_stage_the_newer_turn_wins(backend_stores: Stores) -> None:
    """What the window changes: the same question ranked with the time words as plain words."""
    stores = await _stored(backend_stores)
    rerank.TIME_AWARE = False
    try:
        assert (await _first_texts(stores, "What did Mia say about the garden pond two weeks ago?"))[0] == SAID[3][1]
    finally:
        rerank.TIME_AWARE = True


async def test_first_and_most_recent_questions_take_the_ends_of_the_topic(backend_stores: Stores) -> None:
    stores = await _stored(backend_stores)
    assert (await _first_texts(stores, "When did Mia first mention the garden pond?"))[0] == SAID[0][1]
    assert (await _first_texts(stores, "我第一次说garden pond是什么时候？"))[0] == SAID[0][1]
    assert (await _first_texts(stores, "What did Mia most recently say about the garden pond?"))[0] == SAID[3][1]


async def _newest(searcher: object, scope: SearchScope) -> int | None:
    if isinstance(searcher, SharedSearchService):
        return await searcher.index.newest("default", scope)
    assert isinstance(searcher, SearchService)
    return await searcher.store.run("default", lambda index: index.newest(scope))


async def test_the_scopes_newest_message_is_its_own_chats(backend_stores: Stores) -> None:
    stores = await _stored(backend_stores)
    searcher = stores.search.open(SEARCHERS)
    everywhere = SearchScope(None, agent_scoped=lambda _: True)
    try:
        await searcher.search("default", "pond", everywhere, 1)  # every chat caught up
        assert await _newest(searcher, SearchScope(session=str(KEY))) == NOW
        assert await _newest(searcher, everywhere) == NOW + 90 * DAY_MS
        assert await _newest(searcher, SearchScope(session="default:wecom:nobody")) is None
    finally:
        await searcher.close()


async def test_a_time_out_of_the_calendars_range_is_searched_as_words(backend_stores: Stores) -> None:
    stores = await _stored(backend_stores)
    assert (await _first_texts(stores, "the garden pond 999999 days ago"))[0] in {t for _, t in SAID}
    assert await _first_texts(stores, "garden pond " + "9" * 5000 + " weeks ago")


async def test_the_agent_wide_now_is_of_the_chats_the_scope_shows(backend_stores: Stores) -> None:
    """A chat-scoped channel's chat (never shown to an agent-wide search) has no say in its "last week"."""
    stores = await _stored(backend_stores)
    private = session_key("default", "telegram", "a-private-chat")
    await stores.sessions.append(private, _records([(0, "garden pond")], NOW + 400 * DAY_MS))
    searcher = stores.search.open(SEARCHERS)
    wecom_only = SearchScope(None, agent_scoped=lambda channel: channel == "wecom")
    try:
        await searcher.search("default", "pond", SearchScope(None, agent_scoped=lambda _: True), 1)  # all caught up
        assert await _newest(searcher, wecom_only) == NOW + 90 * DAY_MS
        assert await _newest(searcher, SearchScope(None, agent_scoped=lambda channel: channel == "slack")) is None
    finally:
        await searcher.close()
