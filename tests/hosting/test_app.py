"""The composition root gives the gateway what its turns use at construction, and the features the same record."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import threading

import pytest

from agenthub.config import Settings
from agenthub.gateway.memory_host import GatewayCompactor
from agenthub.hosting.app import api_services, build_services, open_stores
from agenthub.session_keys import session_key
from agenthub.storage.files import FileSessionStore
from agenthub.storage.idempotency import InMemoryIdempotency
from agenthub.storage.inbox import InMemoryInbox
from agenthub.storage.usage import UsageRow
from tests.support.fakes.anthropic import FakeAnthropic

KEY = session_key("default", "http", "c1")


async def test_the_turns_services_are_fixed_at_construction_and_shared_with_the_features(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    inbox = InMemoryInbox()
    async with build_services(settings, inbox=inbox) as services:
        turn = services.gateway.turn_services
        assert services.turn is turn and services.gateway.turns.services is turn
        assert turn.inbox is inbox and turn.usage is not None and isinstance(turn.compactor, GatewayCompactor)
        assert services.memory is not None and turn.compactor.compactor is services.memory.compactor
        with pytest.raises(dataclasses.FrozenInstanceError):
            turn.inbox = None  # type: ignore[misc]
        api = api_services(services, inbox, InMemoryIdempotency(window_s=60))
        assert api.compactor is turn.compactor and api.usage is turn.usage
        assert services.gateway.commands.help_text("en").splitlines()[-1].startswith("/usage ")  # last in /help


async def test_a_gateway_built_without_an_inbox_stores_nothing_before_its_turns(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    async with build_services(settings) as services:
        assert services.turn.inbox is None


async def test_the_files_search_follows_the_history_writer_whether_or_not_stores_are_given(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """The composition root hands the files' searcher the history writer's hand-overs (an append indexed from the
    lines as written); the gateway only observes the history."""
    stores = await open_stores(settings)
    try:
        for given in (stores, None):
            async with build_services(settings, stores=given) as services:
                gateway = services.gateway
                writer = getattr(gateway.history.store, "writer")  # noqa: B009 - the files' store
                assert [f.__self__ for f in writer.followers] == [gateway.search]
                assert gateway.search.history_changed in gateway.history.observers
            assert writer.followers == []  # let go when the gateway closed its searcher
    finally:
        await stores.aclose()


async def test_a_calls_usage_rows_reach_the_spool_before_the_turns_next_history_write(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """On the files backend the spool writes on the history writer's thread: held there, the next history append
    waits too, so an answer never lands before the usage rows of the call that made it (a kill loses neither)."""
    async with build_services(settings) as services:
        usage, store = services.turn.usage, services.gateway.history.store
        assert usage is not None and isinstance(store, FileSessionStore)
        spool = usage.recorder.spool
        assert spool is not None
        held = threading.Event()
        spool.thread.post(functools.partial(held.wait, 5))
        spool.append([UsageRow("2026-12-04", "turn", "default", "http", "c1", "alice", "m", 7, 1, 0, 0, at=1.7e9)])
        answer = asyncio.create_task(store.append(KEY, [{"role": "assistant", "content": "hi", "timestamp": 1}]))
        await asyncio.wait([answer], timeout=0.2)
        assert not answer.done()  # queued behind the spool's write on the one thread
        held.set()
        await answer
        assert json.loads(spool.path.read_text(encoding="utf-8").splitlines()[0])["input"] == 7
