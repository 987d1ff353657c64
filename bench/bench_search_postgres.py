"""memory_search on PostgreSQL: query p50/p99 at 100,000 stored messages (the shared index; frequent terms summed from
the instance's memory), and the index update per append ÷ the append (the same message, both on the database).

Run: PYTHONPATH=. .venv/bin/python bench/bench_search_postgres.py [--sessions 1000] [--per-session 100]
(starts a throw-away durable PostgreSQL of its own, as the test suite does).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from _search_corpus import PLANTED, message, percentile, timed  # the corpus and timing the search benches share

from agenthub.search.shared import SharedSearchService
from agenthub.search.text import query_terms
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres import Database, PostgresSessionStore
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.search_index import SearchScope
from tests.support.postgres import migrated, new_server

AGENT = "bench"
QUERIES = 50
APPENDS = 200
SESSIONS_AT_ONCE = 10


async def load_corpus(sessions: PostgresSessionStore, search: SharedSearchService, count: int, per: int) -> SessionKey:
    """`count` × `per` messages stored and indexed; one fact planted in one session. Returns that session."""
    rng = random.Random(13)
    planted = SessionKey(AGENT, "wecom", f"group-{count // 2}")
    start = time.perf_counter()
    for s in range(count):
        key = SessionKey(AGENT, "wecom", f"group-{s}")
        records = [message(rng, s * per + i) for i in range(per)]
        if key == planted:
            records[per // 2] = {"role": "user", "content": PLANTED, "timestamp": 1}
        await sessions.append(key, records)
    stored = time.perf_counter() - start
    start = time.perf_counter()
    await search.catch_up(AGENT, None)
    indexed = time.perf_counter() - start
    start = time.perf_counter()
    await search.pack(AGENT)  # what the background packer left pending
    packed = time.perf_counter() - start
    print(f"stored {count * per} messages in {count} sessions in {stored:.1f} s, indexed in {indexed:.1f} s "
          f"(the rest packed after it in {packed:.1f} s)")  # fmt: skip
    return planted


async def bench_queries(search: SharedSearchService, planted: SessionKey) -> None:
    """Each query through the service, as the tool asks it: tokenised, the scope caught up, ranked in SQL."""
    everything, one_chat = SearchScope(None, agent_scoped=lambda _: True), SearchScope(str(planted))
    cases: list[tuple[str, str, SearchScope]] = [
        ("rare english word, all sessions", "nightingale", everything),
        ("rare chinese word, all sessions", "夜莺", everything),
        ("question as asked, all sessions", "What was the password we agreed on?", everything),
        ("chinese question, all sessions", "我们之前说的暗号是什么？", everything),
        ("common english words, all sessions", "budget meeting with the customer", everything),
        ("common chinese words, all sessions", "预算 会议 客户 合同", everything),
        ("a name and a number, all sessions", "Evan 1234", everything),
        ("common words, one chat", "budget meeting customer", one_chat),
        ("rare word, one chat", "nightingale", one_chat),
    ]
    overall: list[float] = []
    for name, query, scope in cases:
        start = time.perf_counter()
        hits = await search.search(AGENT, query, scope, 5)  # the first: frequent terms read into memory
        first = (time.perf_counter() - start) * 1000
        times = await timed(lambda q=query, s=scope: search.search(AGENT, q, s, 5), QUERIES)  # type: ignore[misc]
        overall += times
        print(f"  {name:40s} hits={len(hits)}  first={first:7.1f} ms  p50={percentile(times, 0.5):7.2f} ms  "
              f"p99={percentile(times, 0.99):7.2f} ms")  # fmt: skip
    stats = await search.stats(AGENT)
    print(f"memory_search (postgres) at {stats['docs']} passages: p50={percentile(overall, 0.5):.2f} ms  "
          f"p99={percentile(overall, 0.99):.2f} ms")  # fmt: skip


async def bench_pruning(database: Database, planted: SessionKey) -> None:
    """The same searches by two instances, one pruning its in-memory ranking (`search_prune`), one scoring every
    posting (as before it), asked alternately so both see the same load; p50/p99 of each and their ratio."""
    pruning, summing = (
        SharedSearchService(PostgresSearchIndex(database, prune=prune), PostgresIndexFeed(database))
        for prune in (True, False)
    )
    everything = SearchScope(None, agent_scoped=lambda _: True)
    queries = ["我们之前说的暗号是什么？", "预算 会议 客户 合同", "budget meeting with the customer", "Evan 1234"]
    queries += ["What was the password we agreed on?", "nightingale"]
    times: dict[bool, list[float]] = {True: [], False: []}
    same = 0
    for query in queries:  # warm, and the hits compared
        found = [[h.passage for h in await s.search(AGENT, query, everything, 5)] for s in (pruning, summing)]
        same += found[0] == found[1]
        terms = query_terms(query)
        ranked: dict[bool, list[float]] = {True: [], False: []}  # the index alone, asked as the service asks it first
        for _ in range(QUERIES):
            for prune, service in ((True, pruning), (False, summing)):
                start = time.perf_counter()
                await service.search(AGENT, query, everything, 5)
                times[prune].append(time.perf_counter() - start)
                start = time.perf_counter()
                await service.index.search(AGENT, terms, everything, 10)
                ranked[prune].append(time.perf_counter() - start)
        print(f"  the index alone, {query!r}: p50 {percentile(ranked[True], 0.5):.2f} vs "
              f"{percentile(ranked[False], 0.5):.2f} ms, p99 {percentile(ranked[True], 0.99):.2f} vs "
              f"{percentile(ranked[False], 0.99):.2f} ms (pruning vs every posting)")  # fmt: skip
    on, off = times[True], times[False]
    p50, p99 = (percentile(on, 0.5), percentile(off, 0.5)), (percentile(on, 0.99), percentile(off, 0.99))
    print(f"pruning vs scoring every posting ({same} of {len(queries)} queries: the same hits), {len(on)} searches "
          f"each, alternately: p50 {p50[0]:.2f} vs {p50[1]:.2f} ms, p99 {p99[0]:.2f} vs {p99[1]:.2f} ms "
          f"(ratio p50 {p50[0] / p50[1]:.2f}, p99 {p99[0] / p99[1]:.2f})")  # fmt: skip


async def bench_preload(database: Database) -> None:
    """Another instance starting: its most frequent terms read into memory in the background, then its first
    searches of common words."""
    other = SharedSearchService(PostgresSearchIndex(database), PostgresIndexFeed(database))
    start = time.perf_counter()
    terms = await other.index.preload(AGENT)
    loaded = time.perf_counter() - start
    firsts = []
    everything = SearchScope(None, agent_scoped=lambda _: True)
    for query in ("budget meeting with the customer", "预算 会议 客户 合同", "我们之前说的暗号是什么？"):
        start = time.perf_counter()
        await other.search(AGENT, query, everything, 5)
        firsts.append(f"{(time.perf_counter() - start) * 1000:.1f}")
    print(f"a new instance preloads {terms} frequent terms ({other.index.cache.read} postings) in {loaded:.2f} s; "
          f"then first searches of common words: {', '.join(firsts)} ms")  # fmt: skip


async def bench_append_cost(sessions: PostgresSessionStore, search: SharedSearchService) -> None:
    """Median seconds of an append vs of the index update it causes (catching the session up); then what packing
    the docs appended costs (the background packer's share of the index work), per append."""
    await search.pack(AGENT)
    rng = random.Random(7)
    key = SessionKey(AGENT, "http", "append")
    appends, updates = [], []
    for i in range(APPENDS):
        start = time.perf_counter()
        await sessions.append(key, [message(rng, i)])
        appends.append(time.perf_counter() - start)
        start = time.perf_counter()
        await search.sync_session(key)
        updates.append(time.perf_counter() - start)
    append_s, update_s = statistics.median(appends), statistics.median(updates)
    print(
        f"append {append_s * 1e6:.0f} us, index update after each append {update_s * 1e6:.0f} us, "
        f"ratio update/append = {update_s / append_s:.2f}"
    )
    # as the service does it: the appends of SYNC_DELAY_S (a turn's user message, tool calls, reply) read at once
    batch, appended, synced = 6, 0.0, 0.0
    for i in range(APPENDS // batch):
        start = time.perf_counter()
        for j in range(batch):
            await sessions.append(key, [message(rng, i * batch + j)])
        appended += time.perf_counter() - start
        start = time.perf_counter()
        await search.sync_session(key)
        synced += time.perf_counter() - start
    print(f"batched, one session ({batch} appends per catch-up): index work / append work = "
          f"{synced / appended:.2f}")  # fmt: skip
    # as the service's follower does it: every session written in the last SYNC_DELAY_S caught up in one batch
    keys = [SessionKey(AGENT, "http", f"busy-{n}") for n in range(SESSIONS_AT_ONCE)]
    appended = synced = 0.0
    rounds = 3 * (APPENDS // (batch * len(keys)) + 1)
    for i in range(rounds):
        start = time.perf_counter()
        for key in keys:
            for j in range(batch):
                await sessions.append(key, [message(rng, i * batch + j)])
        appended += time.perf_counter() - start
        start = time.perf_counter()
        await search.sync_sessions(keys)
        synced += time.perf_counter() - start
    print(f"as the follower does it ({batch} appends in each of {len(keys)} sessions per catch-up): "
          f"index work / append work = {synced / appended:.2f}")  # fmt: skip
    start = time.perf_counter()
    packed = await search.pack(AGENT)
    packing = time.perf_counter() - start
    per_append = appended / (rounds * batch * len(keys))
    print(f"packing the {packed} docs appended above: {packing * 1e3:.0f} ms, {packing / packed * 1e6:.0f} us per doc "
          f"= {packing / packed / per_append:.2f} × an append; follower + packing = "
          f"{synced / appended + packing / packed / per_append:.2f} × the append work")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--per-session", type=int, default=100)
    args = parser.parse_args()
    server = new_server(durable=True)
    try:
        database = Database(migrated(server.create_database()))
        sessions = PostgresSessionStore(database)
        search = SharedSearchService(PostgresSearchIndex(database), PostgresIndexFeed(database))
        planted = await load_corpus(sessions, search, args.sessions, args.per_session)
        async with database.connection("analyse") as conn:
            await conn.execute("VACUUM ANALYZE")
        await bench_queries(search, planted)
        await bench_pruning(database, planted)
        await bench_preload(database)
        await bench_append_cost(sessions, search)
        await database.close()
    finally:
        server.remove()


if __name__ == "__main__":
    asyncio.run(main())
