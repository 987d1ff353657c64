"""Traversal and bad ids through every entry point that names a memory file (the HTTP routes, "forget me", L3's
material), on the files and on PostgreSQL: refused with a clear error before any memory file is touched."""

from __future__ import annotations

import pytest

from agenthub.config import Settings
from agenthub.errors import InvalidIdError
from agenthub.forget.redact import Person
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import gateway_forgetter
from agenthub.memory.wiring import L3_TIMER
from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.harness import running_api
from tests.support.http import AGENT
from tests.support.memory import echo_l3, gateway_on, services_on

TRAVERSALS = ["../../auth/USER", "..%2F..%2Fauth%2FUSER", "%252e%252e%252fUSER", "a/../../b", "C:evil", "x\x00y"]
PLANTED = "- a fact nobody may overwrite or delete\n"


async def plant(gw: GatewayCore) -> list[MemoryName]:
    """The shared profile, the agent's memory and one person's private profile, with known text."""
    agent = gw.agents.get("default")
    names = [
        MemoryName.shared_profile(),
        gw.memory_files.memory_name(agent),
        gw.memory_files.person_profile(agent, SessionKey("default", "wecom", "alice"), "alice", "private"),
    ]
    for name in names:
        await gw.memory_files.store.write(name, PLANTED)
    return names


async def unchanged(gw: GatewayCore, names: list[MemoryName]) -> bool:
    return await gw.memory_files.read_many(names) == [PLANTED] * len(names)


@pytest.mark.parametrize("chat_id", TRAVERSALS)
async def test_a_traversing_chat_id_in_a_route_is_a_400_and_no_memory_file_changes(
    backend_settings: Settings, fake_llm: FakeAnthropic, chat_id: str
) -> None:
    async with running_api(backend_settings) as api:
        names = await plant(api.gateway)
        quoted = chat_id.replace("/", "%2F").replace("\x00", "%00")
        for method, path, body in [
            ("DELETE", f"{AGENT}/sessions/{quoted}", None),
            ("POST", f"{AGENT}/sessions/{quoted}/compact", None),
            ("POST", f"{AGENT}/chat", {"chat_id": chat_id, "content": "hi"}),
            ("POST", "/api/forget", {"channel": chat_id, "sender_id": "alice"}),
        ]:
            status, answer = await api.call(method, path, json=body)
            assert status in (400, 404), (method, path, status, answer)
            if status == 400:
                assert answer["error"]["code"] in ("invalid_id", "bad_request"), answer
        status, answer = await api.call("POST", "/api/forget", json={"channel": "wecom", "sender_id": chat_id})
        assert (status == 400) == ("\x00" in chat_id), answer  # a sender id a chat may send names only safe files
        assert await unchanged(api.gateway, names)


async def test_forget_of_a_traversing_sender_id_touches_no_other_memory(backend_settings: Settings) -> None:
    """A sender id with traversal material names its profiles by a digest (nothing of it is a path); one with NUL,
    which no store keeps, is refused before anything is touched."""
    async with services_on(backend_settings) as services:
        gw = services.gateway
        names = await plant(gw)
        for sender in TRAVERSALS:
            forget = gateway_forgetter(services).forget_everywhere(
                [gw.agents.get("default")], Person("wecom", sender), actor="t"
            )
            if "\x00" in sender:
                with pytest.raises(InvalidIdError):
                    await forget
            else:
                assert (await forget).profiles == 0
        assert await unchanged(gw, names)


async def test_an_l3_run_over_a_stored_message_with_a_traversing_sender_writes_no_profile_outside(
    backend_settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """A record in a history is data, never a path: its sender id names a profile only by its digest, nothing
    planted changes, and the other senders' profiles are still written."""
    write_agent(backend_settings.agents_dir, "default", {"memory": {"user_profile": "per_user"}})
    fake_llm.responder = echo_l3
    async with gateway_on(backend_settings) as gw:
        names = await plant(gw)
        key = SessionKey("default", "wecom", "team")
        record = {"role": "user", "content": "hello", "sender_id": "../../../USER", "chat_type": "group"}
        bob = {"role": "user", "content": "I am Bob, I like tea", "sender_id": "bob", "chat_type": "group"}
        await gw.history.append(
            key, {**record, "timestamp": 1_700_000_000_000}, {**bob, "timestamp": 1_700_000_000_001}
        )
        await gw.timers[L3_TIMER].tick_now()
        assert await gw.memory_files.read_many(names[::2]) == [PLANTED, PLANTED]  # both profiles untouched
        bobs = gw.memory_files.person_profile(gw.agents.get("default"), key, "bob", "group")
        assert "I like tea" in await gw.memory_files.read(bobs)
        assert not list(backend_settings.auth_dir.parent.glob("USER*"))
