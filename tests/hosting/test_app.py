"""The composition root gives the gateway what its turns use at construction, and the features the same record."""

from __future__ import annotations

import dataclasses

import pytest

from agenthub.config import Settings
from agenthub.gateway.memory_host import GatewayCompactor
from agenthub.hosting.app import api_services, build_services, open_stores
from agenthub.storage.idempotency import InMemoryIdempotency
from agenthub.storage.inbox import InMemoryInbox
from tests.support.fakes.anthropic import FakeAnthropic


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
