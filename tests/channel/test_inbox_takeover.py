"""Several instances on one PostgreSQL, in one process: the HTTP messages an instance had accepted when it died
are answered by the survivors, each exactly once (one user record and one answer in its session), none by both;
each settled, as the HTTP API's are, by the statement that stores its answer (and only by its owner's)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agenthub.api.idempotency import answered_once_stored
from agenthub.channel.inbox_flow import HTTP_SOURCE, InboxSubmitter, InstanceInbox
from agenthub.config import Settings
from agenthub.errors import StorageError
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway, web_server
from agenthub.messages import DoneEvent, ErrorCode, ErrorEvent, InboundMessage
from agenthub.session_keys import session_key
from agenthub.storage.lease import INSTANCE_LEASE_PREFIX
from agenthub.storage.meta import text_of
from agenthub.storage.singleton import InstanceLeases
from agenthub.storage.stores import Stores, open_stores
from tests.support.fakes.anthropic import FakeAnthropic, last_user_text, reply_text
from tests.support.fakes.submitter import RecordingSubmitter
from tests.support.leases import InstanceView
from tests.support.roots import make_settings

LEASE_S = 3.0
"""Short, so a dead instance is noticed quickly; long enough that a survivor busy starting 20 turns on a loaded box
still renews its own lease in time (one that misses its renewals looks dead to the others)."""
MESSAGES = 20
DEADLINE_S = 60.0


@dataclass
class Instance:
    settings: Settings
    stores: Stores
    gateway: GatewayCore
    submitter: InboxSubmitter
    inbox: InstanceInbox
    link: InstanceView
    """This instance's link to the lease store: `down` is its death as the others see it."""
    channel: RecordingSubmitter
    """Every handle the inbox submitted on this instance: what a push channel would deliver."""


@asynccontextmanager
async def instance(root: Path, dsn: str, llm: FakeAnthropic) -> AsyncIterator[Instance]:
    """One daemon's inbox and gateway: its own directories, pool and holder, the shared database."""
    store = {"backend": "postgres", "dsn": dsn, "lease_s": LEASE_S}
    settings = make_settings(root, llm.base_url, store=store, llm={"timeout_s": 3 * DEADLINE_S})
    async with AsyncExitStack() as stack:
        stores = await open_stores(settings)
        stack.push_async_callback(stores.aclose)
        link = InstanceView(stores.leases)
        leases = InstanceLeases(store=link, holder=stores.holder, ttl_s=LEASE_S)
        built = build_gateway(settings, stores=stores, leases=leases, inbox=stores.inbox)  # as the daemon does
        gateway = await stack.enter_async_context(built)
        channel = RecordingSubmitter(gateway)
        submitter = InboxSubmitter(stores.inbox, channel, answered_by_storing=answered_once_stored)  # the API's
        stack.push_async_callback(submitter.aclose)
        inbox = InstanceInbox(stores.inbox, leases, submitter, [])
        stack.push_async_callback(inbox.close)
        await inbox.open()
        inbox.start()
        yield Instance(settings, stores, gateway, submitter, inbox, link, channel)


def chat(n: int) -> InboundMessage:
    return InboundMessage("http", f"s{n}", "user", f"问题 {n}", agent="default")


async def test_a_dead_instance_s_accepted_messages_are_answered_once_each_by_the_survivors(
    tmp_path: Path, postgres_dsn: str
) -> None:
    held = asyncio.Event()  # never set: the dying instance's model answers nothing
    dying_llm = FakeAnthropic(responder=lambda body: reply_text("never", hold=held))
    survivors_llm = FakeAnthropic(responder=lambda body: reply_text("答 " + question(body)))
    async with dying_llm, survivors_llm, AsyncExitStack() as stack:
        a = await stack.enter_async_context(instance(tmp_path / "a", postgres_dsn, dying_llm))
        for n in range(MESSAGES):
            await a.submitter.submit(HTTP_SOURCE, chat(n))
        await dying_llm.wait_for_requests(MESSAGES, timeout_s=DEADLINE_S)  # every turn is at the model, held
        a.link.down = True  # A dies: no renewal, no release; its `instance:` lease runs out
        b = await stack.enter_async_context(instance(tmp_path / "b", postgres_dsn, survivors_llm))
        c = await stack.enter_async_context(instance(tmp_path / "c", postgres_dsn, survivors_llm))

        histories = await answered_histories(b, MESSAGES)
        for n in range(MESSAGES):
            assert histories[n] == [("user", f"问题 {n}"), ("assistant", f"答 问题 {n}")]
        asked = sorted(question(r.body or {}) for r in survivors_llm.message_requests())
        assert asked == sorted(f"问题 {n}" for n in range(MESSAGES))  # each once: none answered by both
        assert b.inbox.taken_over + c.inbox.taken_over == MESSAGES
        assert await a.stores.inbox.count() == 0  # settled by the survivors
        assert "agenthub_inbox_takeovers_total" in "\n".join(b.inbox.metrics())


async def test_an_instance_whose_liveness_lease_lapsed_mid_turn_neither_delivers_nor_accepts_and_one_answer_goes_out(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """A's `instance:` lease cannot be renewed (a stalled store) while its turn is at the model, a second message
    of the chat queued behind it, and its session lease still holds: B claims both entries and waits for the
    session; A regains its lease and its answer comes back. Only the entries' owner (B) delivers: the first from the
    answer A stored, the second from its own model call; A neither delivers nor runs the queued one."""
    held = asyncio.Event()
    a_llm = FakeAnthropic(responder=lambda body: reply_text("答 " + question(body), hold=held))
    b_llm = FakeAnthropic(responder=lambda body: reply_text("答 " + question(body)))
    async with a_llm, b_llm, AsyncExitStack() as stack:
        a = await stack.enter_async_context(instance(tmp_path / "a", postgres_dsn, a_llm))
        b = await stack.enter_async_context(instance(tmp_path / "b", postgres_dsn, b_llm))
        await a.submitter.submit(HTTP_SOURCE, chat(0))
        await a_llm.wait_for_requests(1, timeout_s=DEADLINE_S)  # A's turn is at the model, held
        await a.submitter.submit(HTTP_SOURCE, dataclasses.replace(chat(0), content="问题 0b"))  # queued behind it
        a.link.down_for = INSTANCE_LEASE_PREFIX  # only A's liveness lease stalls
        await until(lambda: b.inbox.taken_over == 2)  # B owns both now; its turn waits for A's session lease
        assert not a.inbox.alive
        with pytest.raises(StorageError):  # while A looks dead it accepts nothing (the platform retries)
            await a.submitter.submit(HTTP_SOURCE, chat(1))
        a.link.down_for = ""
        await until(lambda: a.inbox.alive)  # A's keeper regains `instance:A`
        held.set()  # A's answer comes back now
        finals = [await h.result() for h in [*a.channel.handles, *b.channel.handles]]
        delivered = sorted(f.full_text for f in finals if isinstance(f, DoneEvent) and not f.joined)
        assert delivered == ["答 问题 0", "答 问题 0b"], finals  # one delivery each, by B
        for handle in a.channel.handles:  # A's clients: no answer
            a_final = await handle.result()
            assert isinstance(a_final, ErrorEvent) and a_final.code == ErrorCode.LEASE_LOST
        assert [question(r.body or {}) for r in a_llm.message_requests()] == ["问题 0"]
        assert [question(r.body or {}) for r in b_llm.message_requests()] == ["问题 0b"]
        histories = await answered_histories(b, 1)
        assert histories[0] == [
            ("user", "问题 0"),
            ("assistant", "答 问题 0"),
            ("user", "问题 0b"),
            ("assistant", "答 问题 0b"),
        ]
        await until_async(lambda: a.stores.inbox.count(), 0)


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE_S):
        while not condition():  # noqa: ASYNC110 (the instances' lease loops move it)
            await asyncio.sleep(0.05)


async def until_async(read: Callable[[], Awaitable[int]], wanted: int) -> None:
    async with asyncio.timeout(DEADLINE_S):
        while await read() != wanted:  # noqa: ASYNC110 (the settles land in the database)
            await asyncio.sleep(0.05)


def question(body: dict[str, Any]) -> str:
    """The user's text in a request, without the time and channel the context appends."""
    return last_user_text(body).split("\n\n")[0]


async def answered_histories(survivor: Instance, count: int) -> dict[int, list[tuple[str, Any]]]:
    """Every session's history (role, content) once each has an answer, read through `survivor`'s store."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        histories = {}
        for n in range(count):
            records = await survivor.stores.sessions.load(session_key("default", "http", f"s{n}"))
            histories[n] = [(r["role"], text_of(r["content"])) for r in records]
        if all(h and h[-1][0] == "assistant" for h in histories.values()) or time.monotonic() > deadline:
            return histories
        await asyncio.sleep(0.2)


async def test_metrics_count_every_instance_s_unanswered_messages_and_the_takeovers(
    tmp_path: Path, postgres_dsn: str
) -> None:
    held = asyncio.Event()
    dying_llm = FakeAnthropic(responder=lambda body: reply_text("never", hold=held))
    survivor_llm = FakeAnthropic()
    async with dying_llm, survivor_llm, AsyncExitStack() as stack:
        a = await stack.enter_async_context(instance(tmp_path / "a", postgres_dsn, dying_llm))
        b = await stack.enter_async_context(instance(tmp_path / "b", postgres_dsn, survivor_llm))
        for n in range(3):
            await a.submitter.submit(HTTP_SOURCE, chat(n))
        server = web_server(b.settings, b.gateway, b.stores, b.stores.inbox)
        server.add_metrics(b.inbox.metrics)
        await server.start()
        stack.push_async_callback(server.close)
        url = f"http://127.0.0.1:{server.port}/metrics"
        client = await stack.enter_async_context(aiohttp.ClientSession())
        assert (await metrics(client, url))["agenthub_inbox_depth"] == 3  # A's, though B accepted none
        assert b.stores.inbox.depth() == 0
        a.link.down = True
        deadline = time.monotonic() + DEADLINE_S
        wanted = {"agenthub_inbox_takeovers_total": 3, "agenthub_lease_takeovers_total": 2}  # + L3, AutoCompact
        while {name: (await metrics(client, url))[name] for name in wanted} != wanted:
            assert time.monotonic() < deadline, (
                f"B never took A's messages and leases over: {await metrics(client, url)}"
            )
            await asyncio.sleep(0.1)


async def metrics(client: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with client.get(url) as resp:
        lines = (await resp.text()).splitlines()
    return {line.split()[0]: float(line.split()[1]) for line in lines if line and not line.startswith("#")}


async def test_readyz_is_503_while_the_instance_lease_is_not_held_and_ready_once_it_is_again(
    tmp_path: Path, postgres_dsn: str
) -> None:
    llm = FakeAnthropic()
    async with llm, AsyncExitStack() as stack:
        a = await stack.enter_async_context(instance(tmp_path / "a", postgres_dsn, llm))
        server = web_server(a.settings, a.gateway, a.stores, a.stores.inbox)
        server.alive = lambda: a.inbox.alive  # as the daemon wires it
        server.ready = True
        await server.start()
        stack.push_async_callback(server.close)
        client = await stack.enter_async_context(aiohttp.ClientSession())
        url = f"http://127.0.0.1:{server.port}/readyz"
        assert await status_of(client, url) == (200, "ready")
        a.link.down_for = INSTANCE_LEASE_PREFIX
        await until(lambda: not a.inbox.alive)
        assert await status_of(client, url) == (503, "instance_lease_not_held")  # it would refuse every message
        a.link.down_for = ""
        await until(lambda: a.inbox.alive)
        assert await status_of(client, url) == (200, "ready")


async def status_of(client: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with client.get(url) as resp:
        return resp.status, (await resp.json())["status"]
