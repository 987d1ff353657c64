"""Sender ids the key rules refuse (a backslash, a control character, '..'): the turn is answered and counted, their
profile has a safe stable name "forget me" finds; an id holding NUL is refused before anything is stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway, open_stores
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage
from tests.support.agents import write_agent
from tests.support.budgets import MAX_TOKENS, PER_CALL, store_of, used_by
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.forget import PRIVATE_CONFIG

ODD_SENDERS = ["a\\b", "a\nb", "a\x01b", "../x", "c:\\x", " pad "]


def _all_files(roots: list[Path]) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file()]


@pytest.mark.parametrize("backend", ["files", "postgres"])
@pytest.mark.parametrize("sender", ODD_SENDERS)
async def test_an_odd_sender_is_answered_counted_and_forgotten(
    backend: str,
    sender: str,
    settings_factory: Callable[..., Settings],
    fake_llm: FakeAnthropic,
    request: pytest.FixtureRequest,
) -> None:
    settings = settings_factory(
        budgets={"user_day": 100}, llm={"max_tokens": MAX_TOKENS}, store=store_of(backend, request)
    )
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    fake_llm.default_usage = PER_CALL
    stores = await open_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            final = await (await gw.submit(InboundMessage("wecom", "dm", sender, "hello"))).result()
            assert isinstance(final, DoneEvent), final
            assert await used_by(gw, sender) == 150  # counted for that sender
            over = await (await gw.submit(InboundMessage("wecom", "dm", sender, "again"))).result()
            assert isinstance(over, ErrorEvent) and over.code == "budget_exceeded", over  # and checked for them
            agent = gw.agents.get("default")
            profiles = await gw.memory_files.person_profiles(agent, "wecom", sender)
            await gw.memory_files.store.write(profiles[0], "- likes tea\n")
            for name in profiles:
                path = gw.memory_files.file_of(name)
                if path is not None:
                    assert path.resolve().is_relative_to(settings.auth_dir.resolve() / "users"), path
            again = await gw.memory_files.person_profiles(agent, "wecom", sender)
            assert again[0] == profiles[0]  # stable: the same name every time
            assert await gw.memory_files.read(again[0]) == "- likes tea\n"
            for _ in range(2):  # asked, then confirmed
                await (await gw.submit(InboundMessage("wecom", "dm", sender, "/forget"))).result()
            assert await gw.memory_files.read(profiles[0]) == ""
    finally:
        await stores.aclose()
    for path in _all_files([settings.data_dir, settings.auth_dir]):
        assert path.resolve().is_relative_to(settings.data_dir.resolve()) or path.resolve().is_relative_to(
            settings.auth_dir.resolve()
        )
        assert not any(ord(c) < 32 or c == "\\" for c in path.name), path


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_sender_id_with_nul_is_refused_before_anything_is_stored(
    backend: str, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, request: pytest.FixtureRequest
) -> None:
    settings = settings_factory(
        budgets={"user_day": 1}, llm={"max_tokens": MAX_TOKENS}, store=store_of(backend, request)
    )
    stores = await open_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            final = await (await gw.submit(InboundMessage("wecom", "dm", "a\x00b", "hello"))).result()
            assert isinstance(final, ErrorEvent) and final.code == "invalid_id"
            assert "\x00" not in final.message and "Error" not in final.message
            assert fake_llm.message_requests() == []
            assert isinstance(await (await gw.submit(InboundMessage("wecom", "dm", "bob", "one"))).result(), DoneEvent)
            await used_by(gw, "bob")
            over = await (await gw.submit(InboundMessage("wecom", "dm", "bob", "two"))).result()
            assert isinstance(over, ErrorEvent) and over.code == "budget_exceeded"  # the budget check still works
    finally:
        await stores.aclose()
