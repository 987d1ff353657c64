"""The files index and the PostgreSQL index rank the same stored messages in the same order with the same scores
(one formula, one tie rule: the port's), for questions and keywords in Chinese, English and both."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agenthub.search.service import SearchService
from agenthub.search.shared import SharedSearchService
from agenthub.session_keys import SessionKey
from agenthub.storage.files import FileSessionStore
from agenthub.storage.postgres import Database, PostgresSessionStore
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_cache import PostingsCache
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.search_index import SearchHit, SearchScope
from tests.support.postgres import migrated

SHANGHAI = ZoneInfo("Asia/Shanghai")
"""The questions' days are Shanghai's (`scheduler.timezone`) on both backends, whatever the process's zone."""
WORDS = ["budget", "meeting", "invoice", "launch", "Evan", "Prius", "car", "drive", "CODE-7Q2", "2026-12-01"]
WORDS += ["预算", "会议", "发票", "上线", "夜莺", "暗号", "开车", "老李", "合同", "周报"]
QUERIES = [
    "What car does Evan drive?",
    "我们的暗号是什么？",
    "CODE-7Q2",
    "budget meeting 预算",
    "2026-12-01 上线",
    "invoice",
    "老李 开车 Prius",
    "When did we first discuss the invoice?",  # time-aware: the order, and windows from the scope's newest message
    "最近的预算会议",
    "What did Evan say today about the car?",
    "上周二的合同",
]


def _corpus() -> dict[SessionKey, list[dict[str, Any]]]:
    rng = random.Random(5)
    corpus: dict[SessionKey, list[dict[str, Any]]] = {}
    ts = 1_760_000_000_000
    for s in range(12):
        key = SessionKey("default", ("http", "cli", "wecom")[s % 3], f"chat-{s}")
        records = []
        for m in range(15):
            ts += rng.choice([1000, 1000, 60_000])  # some equal gaps: equal scores happen
            words = rng.sample(WORDS, rng.randint(1, 5))
            text = " ".join(words) if m % 4 else "，".join(words) + "。"
            records.append({"role": ("user", "assistant")[m % 2], "content": text, "timestamp": ts})
        corpus[key] = records
    return corpus


def _shown(hits: list[SearchHit]) -> list[tuple[str, str, int, str, float]]:
    return [(h.passage.session, h.passage.kind, h.passage.seq, h.passage.text, round(h.score, 9)) for h in hits]


@pytest.mark.parametrize("cached_df", [10**9, 1], ids=["summed in SQL", "frequent terms from memory"])
async def test_both_backends_give_the_same_hits_in_the_same_order(
    tmp_path: Path, postgres_dsn: str, cached_df: int
) -> None:
    corpus = _corpus()
    files = FileSessionStore(tmp_path / "data", fsync=False)
    database = Database(migrated(postgres_dsn))
    rows = PostgresSessionStore(database)
    for key, records in corpus.items():
        for start in range(0, len(records), 4):  # several appends, as turns make them
            await files.append(key, records[start : start + 4])
            await rows.append(key, records[start : start + 4])
    on_files = SearchService(tmp_path / "data")
    index = PostgresSearchIndex(database, cache=PostingsCache(cached_df=cached_df))
    on_postgres = SharedSearchService(index, PostgresIndexFeed(database))
    scopes = [
        SearchScope(None, agent_scoped=lambda _: True),
        SearchScope(None, agent_scoped=lambda channel: channel != "wecom"),
        SearchScope("default:wecom:chat-2"),
    ]
    try:
        compared = 0
        for scope in scopes:
            for query in QUERIES:
                expected = _shown(await on_files.search("default", query, scope, 8, zone=SHANGHAI))
                on_both = _shown(await on_postgres.search("default", query, scope, 8, zone=SHANGHAI))
                assert on_both == expected, (query, scope)
                compared += len(expected)
        assert compared > 60
    finally:
        await on_files.close()
        await on_postgres.close()
        await database.close()
