"""The files index: scope rules, deletes that leave no text in the index's files, and an index that is missing,
damaged or of an older schema rebuilt from the histories without losing a turn."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from structlog.testing import capture_logs

from agenthub.search.service import SearchService
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from agenthub.storage.jsonl import encode_lines
from agenthub.storage.paths import AgentLayout
from agenthub.storage.search_files import index_path
from agenthub.storage.search_index import SearchScope

SECRET = "绝密口令是金丝雀 canary-9Z"


def _user(text: str, ts: int = 1_764_000_000_000) -> dict[str, object]:
    return {"role": "user", "content": text, "timestamp": ts}


@pytest_asyncio.fixture
async def data(tmp_path: Path) -> AsyncIterator[tuple[SessionHistory, SearchService]]:
    history = SessionHistory(tmp_path / "data", fsync=False)
    service = SearchService(tmp_path / "data", sync_delay_s=0.05)
    history.observers.append(service.history_changed)
    try:
        yield history, service
    finally:
        await service.close()


def _index_bytes(data_dir: Path) -> bytes:
    directory = index_path(AgentLayout(data_dir, "default")).parent
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())


async def _texts(service: SearchService, query: str, scope: SearchScope, **kw: object) -> list[str]:
    hits = await service.search("default", query, scope, 20, **kw)  # type: ignore[arg-type]
    return [h.passage.text for h in hits]


async def test_scope_one_chat_agent_scoped_channels_and_only_the_named_memory_files(
    data: tuple[SessionHistory, SearchService], tmp_path: Path
) -> None:
    history, service = data
    await history.append(SessionKey("default", "wecom", "group-a"), _user("群A的暗号 secret alpha"))
    await history.append(SessionKey("default", "wecom", "group-b"), _user("群B的暗号 secret beta"))
    await history.append(SessionKey("default", "http", "console"), _user("控制台的暗号 secret gamma"))
    mine, theirs = tmp_path / "bob.md", tmp_path / "alice.md"
    mine.write_text("- bob 的暗号偏好 secret delta\n", encoding="utf-8")
    theirs.write_text("- alice 的暗号偏好 secret epsilon\n", encoding="utf-8")
    files = {"auth/users/bob.md": mine, "auth/users/alice.md": theirs}
    await _texts(service, "secret", SearchScope(None, tuple(files)), memory_files=files)  # both indexed

    chat = SearchScope("default:wecom:group-b", ("auth/users/bob.md",))
    assert sorted(await _texts(service, "secret", chat)) == ["- bob 的暗号偏好 secret delta", "群B的暗号 secret beta"]
    agent = SearchScope(None, (), agent_scoped=lambda channel: channel == "http")
    assert await _texts(service, "暗号 secret", agent) == ["控制台的暗号 secret gamma"]
    nothing = SearchScope(None)
    assert await _texts(service, "secret", nothing) == []


async def test_a_deleted_session_leaves_no_text_in_the_index_files(
    data: tuple[SessionHistory, SearchService], tmp_path: Path
) -> None:
    history, service = data
    doomed, kept = SessionKey("default", "http", "doomed"), SessionKey("default", "http", "kept")
    await history.append(doomed, _user(SECRET), *(_user(f"填充 filler {i}") for i in range(25)))
    await history.replace(doomed, (await history.load(doomed))[-20:])  # the secret is archived
    await history.append(kept, _user("留下的消息 kept words"))
    everywhere = SearchScope(None, agent_scoped=lambda _: True)
    assert await _texts(service, "金丝雀", everywhere) == [SECRET]
    assert b"canary-9z" in _index_bytes(tmp_path / "data")
    await history.delete(doomed)
    await service.purge("default", [doomed])
    assert await _texts(service, "金丝雀 canary-9Z filler", everywhere) == []
    stored = _index_bytes(tmp_path / "data")
    for fragment in ("金丝雀", "canary", "绝密", "填充", "filler"):
        assert fragment.encode() not in stored, fragment
    assert await _texts(service, "kept", everywhere) == ["留下的消息 kept words"]


async def test_a_missing_index_is_rebuilt_from_the_histories(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    history = SessionHistory(data_dir, fsync=False)
    key = SessionKey("default", "http", "chat")
    await history.append(key, *(_user(f"第{i}条 message-{i}") for i in range(50)))  # no index heard these
    service = SearchService(data_dir)
    try:
        everywhere = SearchScope(None, agent_scoped=lambda _: True)
        assert (await _texts(service, "message-49", everywhere))[0] == "第49条 message-49"
        assert (await service.stats("default"))["docs"] == 50
    finally:
        await service.close()
    assert index_path(AgentLayout(data_dir, "default")).exists()


async def test_an_index_of_another_schema_version_is_rebuilt_without_losing_a_turn(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    history = SessionHistory(data_dir, fsync=False)
    key = SessionKey("default", "http", "chat")
    await history.append(key, _user("old turn 旧的一轮"))
    path = index_path(AgentLayout(data_dir, "default"))
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)  # what an older release left: its own tables, another schema version
    db.executescript(
        "CREATE TABLE settings(name TEXT PRIMARY KEY, value TEXT); INSERT INTO settings VALUES('schema','1');"
    )
    db.close()
    service = SearchService(data_dir)
    try:
        everywhere = SearchScope(None, agent_scoped=lambda _: True)
        assert await _texts(service, "旧的一轮", everywhere) == ["old turn 旧的一轮"]
    finally:
        await service.close()


async def test_an_index_damaged_while_in_use_is_rebuilt_on_the_next_search(
    data: tuple[SessionHistory, SearchService], tmp_path: Path
) -> None:
    history, service = data
    key = SessionKey("default", "http", "chat")
    await history.append(key, _user("before the damage 损坏之前"))
    everywhere = SearchScope(None, agent_scoped=lambda _: True)
    assert await _texts(service, "damage", everywhere) == ["before the damage 损坏之前"]

    def damage(index: object) -> None:
        db = index.db  # type: ignore[attr-defined]
        db.execute("DROP TABLE postings")

    await service.store.run("default", damage)
    await history.append(key, _user("after the damage 损坏之后"))
    assert sorted(await _texts(service, "damage", everywhere)) == [
        "after the damage 损坏之后",
        "before the damage 损坏之前",
    ]


async def test_a_corrupt_line_appended_later_is_named_by_its_line_in_the_file_and_the_rest_indexed(
    data: tuple[SessionHistory, SearchService], tmp_path: Path
) -> None:
    """The index reads only what was appended since it last looked: the warning still counts from the file's start,
    and names the session, never the line's text."""
    history, service = data
    key = SessionKey("default", "http", "chat")
    await history.append(key, _user("first 第一"), _user("second 第二"))
    everywhere = SearchScope(None, agent_scoped=lambda _: True)
    assert await _texts(service, "second", everywhere) == ["second 第二"]
    (path,) = (tmp_path / "data" / "default" / "sessions").glob("*.jsonl")
    with path.open("ab") as f:  # a damaged line, then a good one, written behind the history's back
        f.write(b'{"role": "user", "content": "torn secret\n' + encode_lines([_user("third 第三")]))
    with capture_logs() as logs:
        service.history_changed("append", key)
        assert await _texts(service, "third", everywhere) == ["third 第三"]
    corrupt = [e for e in logs if e["event"] == "search_line_corrupt"]
    assert corrupt == [
        {"event": "search_line_corrupt", "log_level": "warning", "kind": "history", "session": str(key), "line": 3}
    ]


async def test_an_index_that_kept_a_nul_from_an_older_release_is_rebuilt_with_u_fffd_at_start(tmp_path: Path) -> None:
    """Docs indexed before search docs were made storable held a NUL as it was (its vector, embedded again at start,
    holds U+FFFD: the same message twice in a search). The index of that release's schema is rebuilt at start."""
    data_dir = tmp_path / "data"
    history = SessionHistory(data_dir, fsync=False)
    key = SessionKey("default", "http", "chat")
    await history.append(key, _user("the vault\x00code nightingale-7"))
    everywhere = SearchScope(None, agent_scoped=lambda _: True)
    service = SearchService(data_dir)
    try:
        assert await _texts(service, "nightingale-7", everywhere) == ["the vault\ufffdcode nightingale-7"]
    finally:
        await service.close()
    db = sqlite3.connect(index_path(AgentLayout(data_dir, "default")), isolation_level=None)
    try:  # as the release before wrote it: schema 9, the NUL kept
        db.execute("UPDATE docs SET text = replace(text, ?, ?)", ("\ufffd", "\x00"))
        db.execute("UPDATE settings SET value = '9' WHERE name = 'schema'")
        assert db.execute("SELECT text FROM docs").fetchall() == [("the vault\x00code nightingale-7",)]
    finally:
        db.close()
    service = SearchService(data_dir)
    try:
        assert await _texts(service, "nightingale-7", everywhere) == ["the vault\ufffdcode nightingale-7"]
    finally:
        await service.close()


async def test_a_line_whose_time_no_index_can_hold_is_indexed_without_it_and_the_appends_after_it_too(
    data: tuple[SessionHistory, SearchService], tmp_path: Path
) -> None:
    """A record with a timestamp of NaN, Infinity, beyond 64 bits or beyond any date (hand-edited, or from elsewhere)
    parses: it is not a corrupt line, and must not fail the read of its file (the update of every session in its
    batch, again at each append) nor the telling of its time: its passage is indexed without a time, and what is
    appended after it is found."""
    history, service = data
    key = SessionKey("default", "http", "chat")
    await history.append(key, _user("first 第一"))
    everywhere = SearchScope(None, agent_scoped=lambda _: True)
    assert await _texts(service, "first", everywhere) == ["first 第一"]
    (path,) = (tmp_path / "data" / "default" / "sessions").glob("*.jsonl")
    with path.open("ab") as f:  # written behind the history's back
        for word, ts in (
            ("nan", b"NaN"),
            ("infinite", b"-Infinity"),
            ("huge", b"123456789012345678901234567890"),
            ("far", b"1e17"),
        ):
            f.write(b'{"role": "user", "content": "%s", "timestamp": %s}\n' % (word.encode(), ts))
    await history.append(key, _user("after 之后"))
    for word in ("nan", "infinite", "huge", "far", "after"):
        hits = await service.search("default", word, everywhere, 20)
        assert [(h.passage.text, h.passage.ts) for h in hits][:1] == [
            (word, None) if word != "after" else ("after 之后", 1_764_000_000_000)
        ], word
