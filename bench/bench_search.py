"""memory_search benchmarks: query p50/p99 at 100,000 stored messages, and the index work per append ÷ the append.

Run: PYTHONPATH=. .venv/bin/python bench/bench_search.py [--sessions 1000] [--per-session 100] [--data DIR] [--rebuild]
    [--merges-only]
(--data keeps the corpus and its index in DIR and reuses them on the next run; --rebuild builds the index again from
the kept corpus, which the amortised index work per append needs: segment writes and merges are counted over the
build; --merges-only: only the searches during a merge of every segment, the merge giving way to them or not.)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _search_corpus import percentile as _p  # the timing the search benches share
from _search_corpus import timed as _timed

from agenthub.search.docs import DOC_READERS
from agenthub.search.service import SearchService
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey, key_from_file_stem
from agenthub.storage import jsonl
from agenthub.storage.files import FileSessionStore
from agenthub.storage.history_handover import Appended
from agenthub.storage.paths import AgentLayout
from agenthub.storage.search_files import index_path
from agenthub.storage.search_files_feed import FileFeeder
from agenthub.storage.search_index import SearchScope
from agenthub.storage.search_merger import NICENESS, Merger
from agenthub.storage.search_sqlite import SqliteSearchIndex, remove_index_files
from agenthub.storage.search_traffic import SearchTraffic

AGENT = "bench"
ZH = [
    "预算",
    "排期",
    "会议",
    "客户",
    "合同",
    "发票",
    "报销",
    "需求",
    "测试",
    "上线",
    "版本",
    "接口",
    "数据库",
    "服务器",
    "前端",
    "后端",
    "设计",
    "文档",
    "周报",
    "季度",
]
EN = [
    "budget",
    "schedule",
    "meeting",
    "customer",
    "contract",
    "invoice",
    "expense",
    "release",
    "version",
    "server",
    "design",
    "report",
]
QUERIES = 100
APPENDS = 300
BATCH = 10


# 3000 CJK characters drawn with Zipf weights, so the trigram vocabulary is as varied as real chat text
HANZI = [chr(0x4E00 + (i * 7) % 20000) for i in range(3000)]
HANZI_WEIGHTS = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(HANZI))))


def _sentence(rng: random.Random, i: int) -> str:
    words = [rng.choice(ZH) for _ in range(4)] + [rng.choice(EN) for _ in range(3)]
    words += ["".join(rng.choices(HANZI, cum_weights=HANZI_WEIGHTS, k=rng.randint(2, 6))) for _ in range(6)]
    rng.shuffle(words)
    return f"第{i}条：" + "，".join(words) + " 的事情我们下周再讨论一下"


def _message(rng: random.Random, i: int) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": _sentence(rng, i), "timestamp": 1_700_000_000_000 + i}


def write_corpus(data_dir: Path, sessions: int, per_session: int) -> SessionKey:
    """`sessions` × `per_session` messages on disk; one fact planted in one session. Returns that session."""
    rng = random.Random(13)
    layout = AgentLayout(data_dir, AGENT)
    planted = SessionKey(AGENT, "wecom", f"group-{sessions // 2}")
    for s in range(sessions):
        key = SessionKey(AGENT, "wecom", f"group-{s}")
        records = [_message(rng, s * per_session + i) for i in range(per_session)]
        if key == planted:
            records[per_session // 2] = {"role": "user", "content": "我们的暗号是夜莺 password nightingale"}
        jsonl.append_records(layout.history_file(key), records, fsync=False)
    return planted


def _settled_work(index: SqliteSearchIndex) -> dict[str, float]:
    """The segment work of the build, once the merges it started (on the merger's thread) are done."""
    index.segments.settle()
    return {"built": index.rebuilt, **index.segments.work_s}


def _query(service: SearchService, query: str, scope: SearchScope) -> Callable[[], Awaitable[object]]:
    return lambda: service.search(AGENT, query, scope, 5)


async def bench_queries(data_dir: Path, planted: SessionKey) -> float | None:
    """Query timings; returns the seconds of segment writes and merges per message of the build (None: the index
    was not built in this run)."""
    service = SearchService(data_dir)
    start = time.perf_counter()
    stats = await service.stats(AGENT)  # the first use builds the index from the files
    built = time.perf_counter() - start
    work = await service.store.run(AGENT, _settled_work)
    per_message = (work["flush"] + work["merge"]) / stats["docs"] if work["built"] else None
    print(
        f"build: {stats['docs']} messages from {stats['sources']} files in {built:.1f} s, of which segments written "
        f"{work['flush']:.1f} s and merged {work['merge']:.1f} s "
        f"({(work['flush'] + work['merge']) / stats['docs'] * 1e6:.0f} us per message); now {stats['segments']} "
        f"segments, {stats['fresh_postings']} postings waiting"
    )
    everything, one_chat = SearchScope(None, agent_scoped=lambda _: True), SearchScope(str(planted))
    cases: list[tuple[str, str, SearchScope]] = [
        ("english word, all sessions", "nightingale", everything),
        ("chinese phrase, all sessions", "暗号是夜莺", everything),
        ("chinese 2 chars, rare, all sessions", "夜莺", everything),
        ("chinese 2 chars, common word, all sessions", "预算", everything),
        ("chinese 2 chars, frequent characters, all sessions", HANZI[0] + HANZI[1], everything),
        ("chinese 1 char, the most frequent, all sessions", HANZI[0], everything),
        ("chinese 1 char, rare, all sessions", HANZI[2999], everything),
        ("two terms mixed, all sessions", "夜莺 password", everything),
        ("common english, all sessions", "budget server", everything),
        ("a question, english, all sessions", "What was the password we agreed on for the server?", everything),
        ("a question, chinese, all sessions", "我们上次说的暗号是什么？预算会议定了吗", everything),
        ("a time question, english, all sessions", "What did we say about the server budget last week?", everything),
        ("a first-time question, chinese, one chat", "我们第一次说暗号是什么时候？", one_chat),
        ("chinese 2 chars, one chat", "夜莺", one_chat),
        ("english word, one chat", "nightingale", one_chat),
        ("common english, every session chat-scoped", "budget server", SearchScope(None)),  # nothing visible
    ]
    overall: list[float] = []
    for name, query, scope in cases:
        hits = await service.search(AGENT, query, scope, 5)
        times = await _timed(_query(service, query, scope), QUERIES)
        overall += times
        print(f"  {name:48s} hits={len(hits)}  p50={_p(times, 0.5):7.2f} ms  p99={_p(times, 0.99):7.2f} ms")
    print(f"memory_search at {stats['docs']} messages: p50={_p(overall, 0.5):.2f} ms  p99={_p(overall, 0.99):.2f} ms")
    await service.close()

    service = SearchService(data_dir)
    start = time.perf_counter()
    await service.stats(AGENT)
    print(f"restart: verifying {stats['sources']} unchanged files took {(time.perf_counter() - start) * 1000:.0f} ms")
    await service.close()
    return per_message


MERGE_QUERIES = ("预算", "budget server", "我们上次说的暗号是什么？预算会议定了吗", "nightingale", HANZI[0] + HANZI[1])


async def bench_during_merge(data_dir: Path) -> None:
    """Searches asked one after another while every segment of the index is merged into one (the largest merge
    there is), on a copy of the index each time: the merge as it was (never waiting, at the process's priority),
    then giving way to the searches (`SearchTraffic`) from a thread of lower priority."""
    index_dir = index_path(AgentLayout(data_dir, AGENT)).parent
    kept = index_dir.with_name("index-kept")
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(index_dir, kept)
    everything = SearchScope(None, agent_scoped=lambda _: True)
    for name, giving in (("not giving way (before)", False), ("giving way to searches", True)):
        shutil.rmtree(index_dir)
        shutil.copytree(kept, index_dir)
        service = SearchService(data_dir)
        quiet: list[float] = []
        for query in MERGE_QUERIES:  # warm, then the same searches with no merge under way
            await service.search(AGENT, query, everything, 5)
            quiet += await _timed(_query(service, query, everything), 10)
        traffic = service.store.traffic if giving else None
        merger = await service.store.run(AGENT, lambda index, t=traffic: _merge_everything(index, t))  # type: ignore[misc]
        start, times = time.perf_counter(), []
        while not merger.settle(0):
            for query in MERGE_QUERIES:
                times += await _timed(_query(service, query, everything), 1)
        merge_s = time.perf_counter() - start
        merger.close()
        await service.close()
        print(
            f"searches during a merge of every segment, {name}: {len(times)} searches, p50={_p(times, 0.5):.2f} ms "
            f"p99={_p(times, 0.99):.2f} ms (with no merge: p50={_p(quiet, 0.5):.2f} ms p99={_p(quiet, 0.99):.2f} ms); "
            f"the merge took {merge_s:.1f} s, {merger.seconds:.1f} s of its thread's CPU, waited {merger.waited:.1f} s"
        )
    shutil.rmtree(index_dir)
    shutil.copytree(kept, index_dir)
    shutil.rmtree(kept)


async def _built(data_dir: Path) -> None:
    """The index built (or caught up) and its merges done."""
    service = SearchService(data_dir)
    await service.stats(AGENT)
    await service.store.run(AGENT, lambda index: index.segments.settle())
    await service.close()


def _merge_everything(index: SqliteSearchIndex, traffic: SearchTraffic | None) -> Merger:
    """A merger of its own merging every live segment of `index` once (started: `settle` waits for it)."""
    segs = [int(row[0]) for row in index.db.execute("SELECT seg FROM segments WHERE building = 0 ORDER BY seg")]
    planned = [segs]
    merger = Merger(
        index.path,
        lambda _db: planned.pop() if planned else None,
        traffic=traffic,
        niceness=NICENESS if traffic is not None else 0,
    )
    merger.wake()
    return merger


async def bench_append_cost(data_dir: Path, fsync: bool, built_per_message: float | None) -> None:
    """Mean seconds of SessionHistory.append vs of the index update it causes (same message, same thread kind), and
    the amortised index work: the batched update without the segment writes and merges that fell in this window,
    plus those of the build per message (`built_per_message`: every tier, not only those 600 appends reached)."""
    rng = random.Random(7)
    history = SessionHistory(data_dir, fsync=fsync)
    handed = _HandOvers(history)  # what the writer hands the service's feed (SearchService.follow)
    key = SessionKey(AGENT, "wecom", f"append-{fsync}")
    await history.append(key, _message(rng, 0))
    index = SqliteSearchIndex(index_path(AgentLayout(data_dir, AGENT)), AGENT)
    feeder = FileFeeder(data_dir, DOC_READERS)
    feeder.sync_session(index, key, "append", handed.take(key))
    appends, updates = [], []
    for i in range(APPENDS):
        start = time.perf_counter()
        await history.append(key, _message(rng, i))
        appends.append(time.perf_counter() - start)
        start = time.perf_counter()
        feeder.sync_session(index, key, "append", handed.take(key))  # what the observer queues on the worker
        updates.append(time.perf_counter() - start)
    before = index.segments.work_s["flush"] + index.segments.work_s["merge"]
    batched = await _batched_cost(history, handed, index, feeder, rng)
    index.segments.settle()
    segments = index.segments.work_s["flush"] + index.segments.work_s["merge"]
    in_batches = (segments - before) / (APPENDS // BATCH * BATCH)
    index.close()
    append_s, update_s = statistics.mean(appends), statistics.mean(updates)  # means: checkpoints count too
    print(
        f"append (fsync={fsync}): {append_s * 1e6:.0f} us; index update after each append {update_s * 1e6:.0f} us "
        f"(ratio {update_s / append_s:.2f}); as the service batches ({BATCH} chats per drain) {batched * 1e6:.0f} us "
        f"per append (ratio {batched / append_s:.2f}); segment writes and merges in these {2 * APPENDS} appends: "
        f"{segments * 1e6 / (2 * APPENDS):.0f} us per append (included above)"
    )
    if built_per_message is not None:
        amortised = batched - in_batches + built_per_message
        print(
            f"  index work per append, amortised (fsync={fsync}): {amortised * 1e6:.0f} us = "
            f"{amortised / append_s:.2f} x the append ({(batched - in_batches) * 1e6:.0f} us read, tokenised and "
            f"stored as the service batches + {built_per_message * 1e6:.0f} us of segment writes and merges per "
            "message over the build)"
        )


class _HandOvers:
    """The history writer's hand-overs by session, as `SearchService` keeps them until its worker takes them."""

    def __init__(self, history: SessionHistory) -> None:
        self._by_key: dict[SessionKey, list[Appended]] = {}
        store = history.store
        assert isinstance(store, FileSessionStore)
        store.writer.followers.append(self._add)

    def _add(self, item: Appended) -> None:
        key = key_from_file_stem(item.stem)
        if key is not None:
            self._by_key.setdefault(key, []).append(item)

    def take(self, key: SessionKey) -> list[Appended]:
        return self._by_key.pop(key, [])


async def _batched_cost(
    history: SessionHistory, handed: _HandOvers, index: SqliteSearchIndex, feeder: FileFeeder, rng: random.Random
) -> float:
    """Seconds of index work per append when `BATCH` chats each appended once are read in one drain (one
    transaction), as `SearchService` does with the appends of `SYNC_DELAY_S`."""
    keys = [SessionKey(AGENT, "wecom", f"batch-{i}") for i in range(BATCH)]
    total = 0.0
    for round_number in range(APPENDS // BATCH):
        for n, key in enumerate(keys):
            await history.append(key, _message(rng, round_number * BATCH + n))
        start = time.perf_counter()
        with index.transaction():
            for key in keys:
                feeder.sync_session(index, key, "append", handed.take(key))
        total += time.perf_counter() - start
    return total / (APPENDS // BATCH * BATCH)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--rebuild", action="store_true", help="build the index of a kept corpus again")
    parser.add_argument("--merges-only", action="store_true", help="only the searches during a merge")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data or Path(tmp) / "data"
        start = time.perf_counter()
        if (data_dir / AGENT / "sessions").is_dir():
            planted = SessionKey(AGENT, "wecom", f"group-{args.sessions // 2}")
        else:
            planted = write_corpus(data_dir, args.sessions, args.per_session)
        total = args.sessions * args.per_session
        print(f"wrote {total} messages in {args.sessions} sessions in {time.perf_counter() - start:.1f} s")
        if args.rebuild:
            remove_index_files(index_path(AgentLayout(data_dir, AGENT)))
        if args.merges_only:
            await _built(data_dir)
        built_per_message = None if args.merges_only else await bench_queries(data_dir, planted)
        await bench_during_merge(data_dir)
        for fsync in (True, False) if not args.merges_only else ():
            await bench_append_cost(data_dir, fsync, built_per_message)
    print(f"machine load: a 1,000,000-step Python loop took {_loop_ms():.0f} ms (about 40-60 ms on an idle core)")


def _loop_ms() -> float:
    start, total = time.perf_counter(), 0.0
    for i in range(1_000_000):
        total += i * 0.5
    return (time.perf_counter() - start) * 1000


if __name__ == "__main__":
    asyncio.run(main())
