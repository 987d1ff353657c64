"""`[search.embeddings]` against a fake endpoint on 127.0.0.1: the client, the vectors kept level with each session
(compaction, delete, "forget me"), reciprocal rank fusion, and a failing endpoint logged once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from structlog.testing import LogCapture

from agenthub.config import EmbeddingsSettings, SearchSettings, Settings
from agenthub.forget.redact import Person
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_services, gateway_forgetter
from agenthub.search.embeddings import EmbeddingsClient, EmbeddingsUnavailable, endpoint_url
from agenthub.search.vectors import VectorIndex, fuse
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from agenthub.storage.paths import AgentLayout
from agenthub.storage.postgres.search_vectors import PostgresVectorStore
from agenthub.storage.search_index import ARCHIVE, HISTORY, Passage, SearchHit, SearchScope, SourceRef
from agenthub.storage.search_vectors import FileVectorStore, vectors_path
from tests.support.fakes.embeddings import DIMS, FakeEmbeddings
from tests.support.memory import gateway_on, services_on
from tests.support.roots import make_settings

KEY = SessionKey("a", "http", "c1")
DESK = SessionKey("default", "http", "desk")
CAR = "Evan bought a red car last spring and drives it to work"


def _settings(server: FakeEmbeddings, **extra: Any) -> EmbeddingsSettings:
    return EmbeddingsSettings.model_validate({"base_url": server.base_url, "model": "fake-embed", **extra})


def _user(text: str, ts: int) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": ts}


@asynccontextmanager
async def _vector_index(
    data_dir: Path, server: FakeEmbeddings, **extra: Any
) -> AsyncIterator[tuple[VectorIndex, SessionHistory]]:
    history = SessionHistory(data_dir, fsync=False)
    index = VectorIndex(EmbeddingsClient(_settings(server, **extra)), FileVectorStore(data_dir), history.store)
    history.observers.append(index.history_changed)
    try:
        yield index, history
    finally:
        await index.close()
        await history.aclose()


@pytest_asyncio.fixture
async def vectors(tmp_path: Path, fake_embeddings: FakeEmbeddings) -> AsyncIterator[tuple[VectorIndex, SessionHistory]]:
    async with _vector_index(tmp_path / "data", fake_embeddings) as opened:
        yield opened


def test_the_endpoint_url_adds_v1_once() -> None:
    assert endpoint_url("https://x.example") == "https://x.example/v1/embeddings"
    assert endpoint_url("https://x.example/v1/") == "https://x.example/v1/embeddings"


async def test_the_client_sends_model_input_and_key_and_orders_by_index(
    fake_embeddings: FakeEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VENDOR_EMBED_KEY", "sk-test-123")
    client = EmbeddingsClient(_settings(fake_embeddings, api_key_env="VENDOR_EMBED_KEY", batch=2))
    try:
        first, second, third = await client.embed(["red car", "blue sky", "red car"])
    finally:
        await client.close()
    assert [len(b["input"]) for b in fake_embeddings.requests] == [2, 1]
    assert fake_embeddings.requests[0] == {"model": "fake-embed", "input": ["red car", "blue sky"]}
    assert fake_embeddings.headers[0]["Authorization"] == "Bearer sk-test-123"
    assert first.shape == (DIMS,) and float(np.linalg.norm(first)) == pytest.approx(1.0, abs=1e-6)
    assert float(first @ third) == pytest.approx(1.0, abs=1e-6) and float(first @ second) < 0.5


async def test_a_failing_endpoint_is_logged_once_per_outage(
    fake_embeddings: FakeEmbeddings, log_capture: LogCapture
) -> None:
    client = EmbeddingsClient(_settings(fake_embeddings, retry_after_s=0, api_key="sk-secret-9"))
    fake_embeddings.down = True
    try:
        for _ in range(5):
            with pytest.raises(EmbeddingsUnavailable):
                await client.embed(["car"], query=True)
        fake_embeddings.down = False
        assert len(await client.embed(["car"])) == 1
    finally:
        await client.close()
    events = [e["event"] for e in log_capture.entries if e["event"].startswith("embeddings_")]
    assert events == ["embeddings_unavailable", "embeddings_available"]
    assert len(fake_embeddings.requests) == 6 and client.failures == 5
    assert "sk-secret-9" not in repr(log_capture.entries)


async def test_a_slow_endpoint_leaves_the_query_after_its_bound(fake_embeddings: FakeEmbeddings) -> None:
    client = EmbeddingsClient(_settings(fake_embeddings, query_timeout_s=0.2))
    fake_embeddings.delay_s = 2.0
    try:
        with pytest.raises(EmbeddingsUnavailable):
            await client.embed(["car"], query=True)
        assert not client.available  # left alone for retry_after_s: the next queries do not wait
    finally:
        await client.close()


def _hit(text: str, seq: int) -> SearchHit:
    return SearchHit(Passage(SourceRef(HISTORY, str(KEY)), seq, "user", None, seq, text), 1.0)


def test_reciprocal_rank_fusion_lifts_what_only_the_vectors_found() -> None:
    a, b, c, paraphrase = _hit("a", 1), _hit("b", 2), _hit("c", 3), _hit("automobile", 4)
    fused = fuse([a, b, c], [(paraphrase.passage, 0.9), (a.passage, 0.8)], 3)
    assert [h.passage.text for h in fused] == ["a", "automobile", "b"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert fused[1].before is None and fused[1].after is None


async def test_vectors_follow_the_session_through_compaction_delete_and_forget(
    vectors: tuple[VectorIndex, SessionHistory], tmp_path: Path
) -> None:
    index, history = vectors
    await history.append(KEY, _user(CAR, 1000), _user("the weather is nice today", 2000))
    await index.settle()
    (best, cosine), *_ = await index.nearest("a", "what automobile does Evan have", SearchScope(str(KEY)), 5)
    assert best.text == CAR and best.kind == HISTORY and cosine > 0.2
    await history.replace(KEY, (await history.load(KEY))[1:])  # the car message is archived
    await index.settle()
    (best, _), *_ = await index.nearest("a", "automobile", SearchScope(str(KEY)), 5)
    assert best.text == CAR and best.kind == ARCHIVE
    assert await index.nearest("a", "automobile", SearchScope("a:http:other"), 5) == []

    await history.rewrite_archive(KEY, lambda records: [])  # "forget me" redacts the archive
    await index.purge("a", [KEY])
    assert [p.text for p, _ in await index.nearest("a", "automobile", SearchScope(str(KEY)), 5)] == [
        "the weather is nice today"
    ]
    directory = vectors_path(AgentLayout(tmp_path / "data", "a")).parent
    assert all(b"red car" not in f.read_bytes() for f in directory.iterdir() if f.is_file())

    await history.delete(KEY)
    await index.settle()
    assert await index.store.stored("a", str(KEY)) == {}


async def test_an_endpoint_down_while_storing_is_caught_up_on_the_next_change(
    tmp_path: Path, fake_embeddings: FakeEmbeddings
) -> None:
    async with _vector_index(tmp_path / "data", fake_embeddings, retry_after_s=0) as (index, history):
        fake_embeddings.down = True
        await history.append(KEY, _user(CAR, 1000))
        await index.settle()
        assert await index.store.stored("a", str(KEY)) == {}
        fake_embeddings.down = False
        await history.append(KEY, _user("and a bicycle", 2000))
        await index.settle()
        assert len(await index.store.stored("a", str(KEY))) == 2


EVAN = [
    "Evan said the weather in Boston is cold",
    "Evan likes pizza with olives",
    "Evan has a sister called Mia",
    "Evan works at the harbour office",
    "Evan plays chess on Sundays",
    "Last spring Evan finally bought himself a car, a red second-hand Toyota sedan, and the vehicle takes him to work",
]
QUESTION = "Which automobile does Evan own?"


async def _fill(gw: GatewayCore) -> None:
    await gw.history.append(KEY, *(_user(text, 1_000 + i) for i, text in enumerate(EVAN)))


async def test_fusion_lifts_a_paraphrase_the_lexical_ranking_misses(
    settings_factory: Callable[..., Settings], fake_embeddings: FakeEmbeddings, tmp_path: Path
) -> None:
    lexical = settings_factory()
    async with build_services(lexical) as services:
        gw = services.gateway
        await _fill(gw)
        plain = [h.passage.text for h in await gw.search.search("a", QUESTION, SearchScope(str(KEY)), 3)]
    assert EVAN[-1] not in plain and len(plain) == 3  # only "Evan" matches, and shorter messages rank higher

    embeddings = {"embeddings": {"base_url": fake_embeddings.base_url, "model": "fake-embed"}}
    fused_settings = make_settings(tmp_path / "fused", lexical.llm.base_url, search=embeddings)
    async with build_services(fused_settings) as services:
        gw = services.gateway
        await _fill(gw)
        assert gw.search.vectors is not None
        await gw.search.vectors.settle()
        hits = await gw.search.search("a", QUESTION, SearchScope(str(KEY)), 3)
    fused = [h.passage.text for h in hits]
    assert EVAN[-1] in fused and len(fused) == 3  # last of six lexically, first by its vector
    assert set(fused) - {EVAN[-1]} <= set(plain)  # the rest is what the lexical ranking found (RRF may reorder it)
    assert any(QUESTION in body["input"] for body in fake_embeddings.requests)


async def test_an_endpoint_down_gives_the_lexical_results_and_one_log_line(
    settings_factory: Callable[..., Settings], fake_embeddings: FakeEmbeddings, log_capture: LogCapture
) -> None:
    settings = settings_factory(search={"embeddings": {"base_url": fake_embeddings.base_url, "model": "fake-embed"}})
    async with build_services(settings) as services:
        gw = services.gateway
        await _fill(gw)
        assert gw.search.vectors is not None
        await gw.search.vectors.settle()
        fake_embeddings.down = True
        gw.search.vectors.client.settings = gw.search.vectors.client.settings.model_copy(update={"retry_after_s": 0})
        results = [await gw.search.search("a", QUESTION, SearchScope(str(KEY)), 3) for _ in range(4)]
        gw.search.vectors = None
        lexical = await gw.search.search("a", QUESTION, SearchScope(str(KEY)), 3)
    assert all([h.passage for h in r] == [h.passage for h in lexical] for r in results)
    assert [e["event"] for e in log_capture.entries if e["event"].startswith("embeddings_")] == [
        "embeddings_unavailable"
    ]


async def test_deleting_a_session_and_forgetting_remove_its_vectors(
    settings_factory: Callable[..., Settings], fake_embeddings: FakeEmbeddings
) -> None:
    settings = settings_factory(search={"embeddings": {"base_url": fake_embeddings.base_url, "model": "fake-embed"}})
    other = SessionKey("a", "http", "c2")
    async with build_services(settings) as services:
        gw = services.gateway
        vectors = gw.search.vectors
        assert vectors is not None
        await _fill(gw)
        await gw.history.append(other, _user("Mia drives a blue automobile", 5_000))
        await vectors.settle()
        assert len(await vectors.store.stored("a", str(KEY))) == len(EVAN)
        await gw.history.replace(other, [], archive_removed=False)  # what "forget me" does to a history
        await gw.search.purge("a", [other])  # and then its index hook
        await gw.history.delete(KEY)
        await vectors.settle()
        assert await vectors.store.stored("a", str(KEY)) == {}
        assert await vectors.store.stored("a", str(other)) == {}
    files = vectors_path(AgentLayout(settings.data_dir, "a")).parent
    assert all(b"Toyota" not in f.read_bytes() and b"Mia drives" not in f.read_bytes() for f in files.iterdir())


async def test_vectors_live_beside_the_index_on_both_backends(
    backend_settings: Settings, fake_embeddings: FakeEmbeddings
) -> None:
    embeddings = EmbeddingsSettings.model_validate({"base_url": fake_embeddings.base_url, "model": "fake-embed"})
    settings = backend_settings.model_copy(update={"search": SearchSettings(embeddings=embeddings)})
    async with gateway_on(settings) as gw:
        vectors = gw.search.vectors
        assert vectors is not None
        await _fill(gw)
        await vectors.settle()
        (best, _), *_ = await vectors.nearest("a", QUESTION, SearchScope(str(KEY)), 3)
        assert best.text == EVAN[-1] and best.kind == HISTORY
        if settings.store.backend == "postgres":
            assert isinstance(vectors.store, PostgresVectorStore)
            async with vectors.store.database.connection("test") as conn:
                cursor = await conn.execute("SELECT count(*) FROM search_vectors WHERE session = %s", (str(KEY),))
                assert await cursor.fetchone() == (len(EVAN),)
        else:
            assert vectors_path(AgentLayout(settings.data_dir, "a")).is_file()
        await gw.history.delete(KEY)
        await vectors.settle()
        assert await vectors.store.stored("a", str(KEY)) == {}


async def test_forget_me_leaves_no_vector_nor_text_of_theirs(
    backend_settings: Settings, fake_embeddings: FakeEmbeddings
) -> None:
    embeddings = EmbeddingsSettings.model_validate({"base_url": fake_embeddings.base_url, "model": "fake-embed"})
    settings = backend_settings.model_copy(update={"search": SearchSettings(embeddings=embeddings)})
    group = SessionKey("default", "wecom", "team")
    said = {"role": "user", "content": "my automobile plate is ZEBRA-4417", "sender_id": "alice", "timestamp": 1}
    kept = {"role": "user", "content": "my bicycle is green", "sender_id": "bob", "timestamp": 2}
    async with services_on(settings) as services:
        gw = services.gateway
        vectors = gw.search.vectors
        assert vectors is not None
        await gw.history.append(group, said, kept)
        await vectors.settle()
        assert len(await vectors.store.stored("default", str(group))) == 2
        await gateway_forgetter(services).forget_everywhere(
            [gw.agents.get("default")], Person("wecom", "alice"), actor="t"
        )
        await vectors.settle()
        left = await vectors.nearest("default", "automobile plate", SearchScope(str(group)), 5)
        assert [p.text for p, _ in left if "ZEBRA" in p.text] == []
        assert any(p.text == "my bicycle is green" for p, _ in left)
        if isinstance(vectors.store, PostgresVectorStore):
            async with vectors.store.database.connection("test") as conn:
                cursor = await conn.execute("SELECT count(*) FROM search_vectors WHERE text LIKE '%ZEBRA%'")
                assert await cursor.fetchone() == (0,)
    if settings.store.backend == "files":
        directory = vectors_path(AgentLayout(settings.data_dir, "default")).parent
        assert all(b"ZEBRA-4417" not in f.read_bytes() for f in directory.iterdir() if f.is_file())


async def test_what_was_stored_before_embeddings_were_on_is_embedded_at_start(
    backend_settings: Settings, fake_embeddings: FakeEmbeddings
) -> None:
    async with gateway_on(backend_settings) as gw:  # embeddings off: nothing is embedded
        await gw.history.append(DESK, _user(CAR, 1))
    embeddings = EmbeddingsSettings.model_validate({"base_url": fake_embeddings.base_url, "model": "fake-embed"})
    settings = backend_settings.model_copy(update={"search": SearchSettings(embeddings=embeddings)})
    async with gateway_on(settings) as gw:  # no change to the session: the catch-up at start embeds it
        vectors = gw.search.vectors
        assert vectors is not None
        for _ in range(200):
            if await vectors.store.stored("default", str(DESK)):
                break
            await asyncio.sleep(0.05)
        assert len(await vectors.store.stored("default", str(DESK))) == 1
