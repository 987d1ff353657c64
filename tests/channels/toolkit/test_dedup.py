"""MessageDedup: a credential's message ids admitted once, a failing memory fails open, keys carry the cred_id."""

from __future__ import annotations

import asyncio
from pathlib import Path

from structlog.testing import LogCapture

from agenthub.channel import ChannelContext, WebRoutes
from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.hosting.app import channel_context, open_stores
from agenthub.storage.dedup import DedupStore
from channels.toolkit.dedup import MessageDedup, open_seen_ids
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.roots import make_settings


def _dedup(path: Path, cred_id: str = "main") -> MessageDedup:
    return MessageDedup(DedupStore(path, ttl_s=60, clock=ManualClock()), channel="demo", cred_id=cred_id)


async def test_fifty_concurrent_duplicates_admit_exactly_one(tmp_path: Path, log_capture: LogCapture) -> None:
    dedup = _dedup(tmp_path / "seen.jsonl")
    results = await asyncio.gather(*(dedup.is_duplicate("m-1") for _ in range(50)))
    assert results.count(False) == 1
    dropped = [e for e in log_capture.entries if e["event"] == "demo_duplicate_dropped"]
    assert len(dropped) == 49 and {e["cred_id"] for e in dropped} == {"main"}
    assert len(dedup) == 1


async def test_many_distinct_ids_at_once_are_all_admitted_and_remembered(tmp_path: Path) -> None:
    path = tmp_path / "seen.jsonl"
    dedup = _dedup(path)
    first = await asyncio.gather(*(dedup.is_duplicate(f"m-{i}") for i in range(50)))
    assert first == [False] * 50
    restarted = _dedup(path)  # the memory is durable: a redelivery after a restart is still caught
    again = await asyncio.gather(*(restarted.is_duplicate(f"m-{i}") for i in range(50)))
    assert again == [True] * 50


async def test_two_credentials_sharing_one_memory_never_collide(tmp_path: Path) -> None:
    store = DedupStore(tmp_path / "seen.jsonl", ttl_s=60, clock=ManualClock())
    first = MessageDedup(store, channel="demo", cred_id="a")
    second = MessageDedup(store, channel="demo", cred_id="b")
    assert await first.is_duplicate("same-id") is False
    assert await second.is_duplicate("same-id") is False  # another bot's message with the same platform id
    assert await first.is_duplicate("same-id") is True


async def test_an_unwritable_memory_fails_open_and_says_so(tmp_path: Path, log_capture: LogCapture) -> None:
    path = tmp_path / "seen.jsonl"
    dedup = _dedup(path)
    path.mkdir()  # every append now fails
    assert await dedup.is_duplicate("m-1") is False  # answered: a possible duplicate beats a certain loss
    assert [e["event"] for e in log_capture.entries if e.get("log_level") == "error"][-1] == "demo_dedup_unavailable"
    path.rmdir()
    assert await dedup.is_duplicate("m-1") is False  # the failed sighting was forgotten, not half-remembered
    assert await dedup.is_duplicate("m-1") is True


async def test_the_replay_window_is_the_memory_s_ttl(tmp_path: Path) -> None:
    assert _dedup(tmp_path / "seen.jsonl").window_s == 60


async def test_a_channel_s_memory_lives_in_its_state_dir_and_survives_a_restart(tmp_path: Path) -> None:
    context = ChannelContext(ScriptedSubmitter(), Settings.model_construct(), WebRoutes(), tmp_path / "state")
    first = MessageDedup(open_seen_ids(context, "demo.dedup.jsonl", ttl_s=60), channel="demo", cred_id="main")
    assert await first.is_duplicate("m-1") is False
    assert (tmp_path / "state" / "demo.dedup.jsonl").is_file()
    again = MessageDedup(open_seen_ids(context, "demo.dedup.jsonl", ttl_s=60), channel="demo", cred_id="main")
    assert await again.is_duplicate("m-1") is True


async def test_on_postgres_every_instance_s_channel_shares_one_memory(tmp_path: Path, postgres_dsn: str) -> None:
    """A redelivery that reaches another instance behind the load balancer is still a duplicate."""
    instances = [make_settings(tmp_path / n, store={"backend": "postgres", "dsn": postgres_dsn}) for n in "ab"]
    stores = [await open_stores(settings) for settings in instances]
    try:
        contexts = [
            channel_context(settings, ScriptedSubmitter(), WebRoutes(), "wecom", store)
            for settings, store in zip(instances, stores, strict=True)
        ]
        a, b = (
            MessageDedup(open_seen_ids(c, "app-1.dedup.jsonl", ttl_s=60), channel="wecom", cred_id="app-1")
            for c in contexts
        )
        assert await a.is_duplicate("m-1") is False
        assert await b.is_duplicate("m-1") is True
        assert not (tmp_path / "a" / "data" / ".channels" / "wecom" / "app-1.dedup.jsonl").exists()
        other = open_seen_ids(
            channel_context(instances[0], ScriptedSubmitter(), WebRoutes(), "feishu", stores[0]),
            "app-1.dedup.jsonl",
            ttl_s=60,
        )
        assert await other.check_and_add("app-1:m-1") is False  # another channel's memory of the same name
    finally:
        for store in stores:
            await store.aclose()
