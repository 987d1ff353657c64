"""The shared inbox's checks before a turn in one round trip: the session's earlier unsettled entries and whether
the turn's entry is still this instance's, that answer serving the `still_mine` right after it, once; with the
instance's liveness lease, every `still_mine` of the turn while that lease is held without a lapse."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agenthub.storage.postgres import PostgresInbox
from agenthub.storage.postgres.database import Database

SESSION = "default:http:ordered"


async def test_the_earlier_entries_and_the_owner_come_in_one_round_trip_and_answer_one_still_mine(
    database: Database,
) -> None:
    a, b = PostgresInbox(database, owner="a"), PostgresInbox(database, owner="b")
    first = await a.accept("http", {"n": 1}, session=SESSION)
    second = await a.accept("http", {"n": 2}, session=SESSION)
    trips = database.latency.count
    assert await a.earlier_unsettled(SESSION, second.id) == [first.id]
    assert await a.still_mine(second.id) is True
    assert database.latency.count == trips + 1  # the owner came with the earlier entries
    assert await b.earlier_unsettled(SESSION, second.id) == [first.id]
    assert await b.still_mine(second.id) is False  # a's entry, seen in b's check
    await a.release(second.id)
    assert await a.still_mine(second.id) is False  # the check answered once: this one asks the database
    assert await a.earlier_unsettled(SESSION, first.id) == []
    assert await a.still_mine(first.id) is True


@dataclass
class Liveness:
    """The instance's liveness lease as the inbox sees it: held or not, and the number of the current hold."""

    held: bool = True
    hold: int | None = 1


async def test_while_the_liveness_lease_is_held_without_a_lapse_the_owner_seen_answers_every_still_mine(
    database: Database,
) -> None:
    liveness = Liveness()
    a = PostgresInbox(database, owner="a")
    a.accept_only_while(liveness)
    entry = await a.accept("http", {"n": 1}, session=SESSION)
    assert await a.earlier_unsettled(SESSION, entry.id) == []
    trips = database.latency.count
    assert await a.still_mine(entry.id) is True  # before the turn
    assert await a.still_mine(entry.id) is True  # after its answer is stored
    assert database.latency.count == trips  # no round trip: nobody may claim an entry of a live instance
    liveness.hold = 2  # the lease lapsed and was taken again: another instance may have claimed it meanwhile
    assert await a.still_mine(entry.id) is True
    assert database.latency.count == trips + 1
    await a.release(entry.id)
    assert await a.still_mine(entry.id) is False  # given up: asked again


async def test_an_entry_accepted_with_nothing_earlier_in_its_session_is_checked_before_its_turn_without_a_round_trip(
    database: Database,
) -> None:
    a = PostgresInbox(database, owner="a")
    a.accept_only_while(Liveness())
    first = await a.accept("http", {"n": 1}, session=SESSION)
    second = await a.accept("http", {"n": 2}, session=SESSION)
    other = await a.accept("http", {"n": 3}, session="default:http:other")
    trips = database.latency.count
    assert await a.earlier_unsettled(SESSION, first.id) == []
    assert await a.earlier_unsettled("default:http:other", other.id) == []
    assert await a.still_mine(first.id) is True
    assert database.latency.count == trips  # the accept saw that nothing came before them
    assert await a.earlier_unsettled(SESSION, second.id) == [first.id]  # something did: asked at the turn
    assert database.latency.count == trips + 1
    await a.settle(first.id)
    assert await a.earlier_unsettled(SESSION, second.id) == []
    trips = database.latency.count
    assert await a.earlier_unsettled(SESSION, first.id) == []  # answered once: then asked
    assert database.latency.count == trips + 1


async def test_an_unrouted_entry_of_the_same_source_accepted_earlier_counts_as_earlier(database: Database) -> None:
    a = PostgresInbox(database, owner="a")
    unrouted = await a.accept("wecom:bot:b1", {"n": 1})  # its session is named later (`assign`)
    routed = await a.accept("wecom:bot:b1", {"n": 2}, session=SESSION)
    await a.assign(unrouted.id, SESSION)
    assert await a.earlier_unsettled(SESSION, routed.id) == [unrouted.id]


async def test_entries_accepted_together_arrive_as_they_were_whatever_characters_they_hold(database: Database) -> None:
    """A batch's entries go as one JSON parameter: payloads with quotes, backslashes, braces, control characters
    and non-ASCII text, and odd sources, are stored as they were, in the order they were accepted."""
    a = PostgresInbox(database, owner="a")
    payloads = [{"text": 'say "hi", {x}'}, {"text": "back\\slash\nline\ttab"}, {"text": "中文 été \U0001f600"}, {}]
    sources = ['web"1', "a,{b}", "NULL", "中文"]
    accepted = await asyncio.gather(
        *(a.accept(source, payload, session=SESSION) for source, payload in zip(sources, payloads, strict=True))
    )
    stored = await PostgresInbox(database, owner="a").unsettled()  # as read again, by a restart
    assert [(e.id, e.source, e.payload, e.session) for e in stored] == [
        (e.id, source, payload, SESSION) for e, source, payload in zip(accepted, sources, payloads, strict=True)
    ]
    assert [e.seq for e in stored] == sorted(e.seq for e in accepted)
