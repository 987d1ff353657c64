"""The files search feed indexes appends from the history writer's hand-over (no file read), and falls back to
reading the file on a rewrite, a missed hand-over or a restart: the index ends identical to a rebuild from the
files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from agenthub.search.service import SearchService
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from agenthub.storage.files import FileSessionStore
from agenthub.storage.paths import AgentLayout
from agenthub.storage.search_files import index_path
from agenthub.storage.search_index import SearchScope
from agenthub.storage.search_sqlite import remove_index_files

AGENT = "default"
EVERYWHERE = SearchScope(None, agent_scoped=lambda _: True)
QUERIES = ["预算 budget", "deploy 服务器", "夜莺 CODE-7Q2", "weekly report", "ok"]


def _user(text: str, ts: int) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": ts}


def _turn(i: int) -> list[dict[str, Any]]:
    """A user message, a tool call whose result is skipped (memory_search) and short and long replies: lines under
    the watermark's 64-byte tail and a file that passes its 4 KB head."""
    ts = 1_700_000_000_000 + i
    tool = {"type": "tool_use", "id": f"t{i}", "name": "memory_search", "input": {"query": "预算"}}
    result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"hidden budget {i}"}
    long = f"deploy 服务器 weekly report number {i} " + "预算 budget 夜莺 CODE-7Q2 " * (3 + i % 5)
    return [
        _user(f"预算 budget question {i}", ts),
        {"role": "assistant", "content": [tool], "timestamp": ts},
        {"role": "user", "content": [result], "timestamp": ts},
        {"role": "assistant", "content": long, "timestamp": ts},
        _user("ok", ts),
    ]


def _opened(data: Path) -> tuple[SessionHistory, SearchService]:
    history = SessionHistory(data, fsync=True)
    service = SearchService(data, sync_delay_s=3600)  # only a search (or close) brings the appends in
    history.observers.append(service.history_changed)
    service.follow(history.store)
    return history, service


async def _warm(service: SearchService) -> None:
    await service.stats(AGENT)  # the index open and caught up: the hand-overs that follow continue its marks


async def _append_turns(history: SessionHistory, keys: list[SessionKey], turns: range) -> int:
    appends = 0
    for i in turns:
        for key in keys:
            for record in _turn(i):
                await history.append(key, record)
                appends += 1
    return appends


def _contents(data: Path) -> dict[str, Any]:
    """Every source with its watermark, every doc (without its id), the totals."""
    db = sqlite3.connect(index_path(AgentLayout(data, AGENT)))
    try:
        sources = sorted(
            (kind, session, name, json.loads(mark))
            for kind, session, name, mark in db.execute("SELECT kind, session, name, watermark FROM sources")
        )
        docs = sorted(
            db.execute(
                "SELECT s.kind, s.session, d.seq, d.role, d.speaker, d.ts, d.dl, d.text "
                "FROM docs d JOIN sources s ON s.id = d.source_id"
            ).fetchall()
        )
        totals = db.execute("SELECT docs, terms FROM totals").fetchall()
    finally:
        db.close()
    return {"sources": sources, "docs": docs, "totals": totals}


async def _results(service: SearchService) -> list[list[tuple[str, int, str, float]]]:
    found = []
    for query in QUERIES:
        hits = await service.search(AGENT, query, EVERYWHERE, 20)
        found.append([(h.passage.source.session, h.passage.seq, h.passage.text, round(h.score, 9)) for h in hits])
    return found


async def _same_as_rebuilt(data: Path, history: SessionHistory, service: SearchService) -> None:
    """The live index (searched, then closed) equals one rebuilt from the files, contents and results alike."""
    live_results = await _results(service)
    await service.close()
    await history.aclose()
    live = _contents(data)
    remove_index_files(index_path(AgentLayout(data, AGENT)))
    rebuilt_service = SearchService(data)
    try:
        rebuilt_results = await _results(rebuilt_service)
    finally:
        await rebuilt_service.close()
    assert live_results == rebuilt_results
    assert any(live_results)
    assert _contents(data) == live


async def test_appends_are_indexed_from_the_hand_over_without_reading_the_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    history, service = _opened(data)
    keys = [SessionKey(AGENT, "http", f"chat-{n}") for n in range(3)]
    await _warm(service)
    appends = await _append_turns(history, keys, range(12))
    await service.stats(AGENT)
    assert service.feeder.handed_over == appends  # every append, none read from its file
    assert (data / AGENT / "sessions" / f"{keys[0].file_stem}.jsonl").stat().st_size > 4096
    await _same_as_rebuilt(data, history, service)


async def test_a_rewrite_between_appends_falls_back_to_the_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    history, service = _opened(data)
    kept, cleared = SessionKey(AGENT, "http", "compacted"), SessionKey(AGENT, "http", "cleared")
    await _warm(service)
    await _append_turns(history, [kept, cleared], range(6))
    messages = await history.load(kept)
    await history.replace(kept, messages[-7:])  # compaction: the history rewritten, the rest archived
    await history.clear(cleared)
    await service.stats(AGENT)  # the hand-overs queued before the rewrite were taken, then the files read again
    before = service.feeder.handed_over
    appends = await _append_turns(history, [kept, cleared], range(6, 9))
    await service.stats(AGENT)
    assert service.feeder.handed_over == before + appends
    await _same_as_rebuilt(data, history, service)


async def test_a_missed_hand_over_falls_back_to_the_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    history, service = _opened(data)
    key = SessionKey(AGENT, "http", "chat")
    await _warm(service)
    await _append_turns(history, [key], range(3))
    await service.stats(AGENT)
    handed = service.feeder.handed_over
    store = history.store
    assert isinstance(store, FileSessionStore)
    store.writer.followers.remove(service.appended)  # these appends are heard (observer), never handed over
    await _append_turns(history, [key], range(3, 4))
    store.writer.followers.append(service.appended)
    await _append_turns(history, [key], range(4, 6))  # handed over, but they do not continue the index's mark
    await service.stats(AGENT)
    assert service.feeder.handed_over == handed
    await _append_turns(history, [key], range(6, 8))  # the mark caught up from the file: handed over again
    await service.stats(AGENT)
    assert service.feeder.handed_over == handed + 10
    await _same_as_rebuilt(data, history, service)


async def test_after_a_restart_the_files_are_read_then_hand_overs_resume(tmp_path: Path) -> None:
    data = tmp_path / "data"
    history, service = _opened(data)
    key = SessionKey(AGENT, "http", "chat")
    await _warm(service)
    await _append_turns(history, [key], range(3))
    await service.close()
    await history.aclose()
    alone = SessionHistory(data, fsync=True)  # written while no index listened
    await _append_turns(alone, [key, SessionKey(AGENT, "http", "other")], range(3, 5))
    await alone.aclose()
    history, service = _opened(data)
    await _append_turns(history, [key], range(5, 6))  # handed over before the index opened (and caught up)
    await service.stats(AGENT)
    assert service.feeder.handed_over == 0
    appends = await _append_turns(history, [key], range(6, 8))
    await service.stats(AGENT)
    assert service.feeder.handed_over == appends
    await _same_as_rebuilt(data, history, service)
