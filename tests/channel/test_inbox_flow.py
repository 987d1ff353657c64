"""Messages through the durable inbox in one process: the HTTP chat route refuses what it cannot store, a reply
cut by the shutdown leaves its entry for the restart, and resume hands each channel its own entries in order."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from structlog.testing import LogCapture

from agenthub.channel.inbox_flow import InboxSubmitter, resume_channels
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import Services, assemble
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, OutboundMessage
from agenthub.storage.inbox import FileInbox, InboxEntry, InMemoryInbox
from agenthub.storage.tokens import TokenStore
from tests.support.disks import fill, small_tmpfs
from tests.support.fakes.anthropic import FakeAnthropic, reply_text


async def test_a_chat_request_the_inbox_cannot_store_gets_503_and_nothing_runs(
    tmp_path: Path, settings: Settings, services: Services, fake_llm: FakeAnthropic
) -> None:
    settings = settings.model_copy(update={"http": settings.http.model_copy(update={"port": 0})})
    token = TokenStore(settings.auth_dir).create("test")
    with small_tmpfs(tmp_path / "inbox-disk") as disk:
        inbox = FileInbox(disk, fsync=True)
        fill(disk)  # the disk is full: accept() is refused
        server, channels = assemble(settings, services, inbox=inbox)
        await server.start()
        try:
            async with aiohttp.ClientSession() as client:
                url = f"http://127.0.0.1:{server.port}/api/agents/default/chat"
                body = {"chat_id": "c1", "content": "hello"}
                headers = {"Authorization": f"Bearer {token}"}
                async with client.post(url, json=body, headers=headers) as resp:
                    status, answer = resp.status, await resp.json()
        finally:
            for channel in channels:
                await channel.stop()
            await server.close()
            await inbox.aclose()
    assert status == 503
    assert answer["error"]["code"] == "storage_unavailable"
    assert "journal" not in answer["error"]["message"]  # the product's text, not the exception's
    assert fake_llm.message_requests() == []
    assert inbox.depth() == 0


async def test_an_answered_entry_is_settled_and_one_the_shutdown_refused_stays_for_the_restart(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    inbox = InMemoryInbox()
    submitter = InboxSubmitter(inbox, gateway)
    fake_llm.script(reply_text("answered"))
    answered = await (await submitter.submit("http", InboundMessage("http", "c1", "me", "first"))).result()
    await gateway.drain(5.0)  # SIGTERM: the gateway answers "restarting"
    refused = await (await submitter.submit("http", InboundMessage("http", "c1", "me", "second"))).result()
    await submitter.aclose()

    assert isinstance(answered, DoneEvent) and isinstance(refused, ErrorEvent) and refused.code == "shutdown"
    left = await inbox.unsettled()
    assert [e.payload["content"] for e in left] == ["second"]


class _Recorder:
    """A channel that records what it is asked to resume."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.resumed: list[list[str]] = []

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: OutboundMessage) -> None: ...

    def can_resume(self, source: str) -> bool:
        return True

    async def resume(self, entries: list[InboxEntry]) -> None:
        self.resumed.append([e.payload["n"] for e in entries])


class _Plain:
    name = "feishu"

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: OutboundMessage) -> None: ...


async def test_resume_hands_each_channel_its_entries_in_acceptance_order_and_logs_the_rest_once_per_source(
    log_capture: LogCapture,
) -> None:
    inbox = InMemoryInbox()
    for source, n in [("wecom:bot:b1", "1"), ("feishu:f1", "2"), ("wecom:app:a1", "3"), ("http", "4")]:
        await inbox.accept(source, {"n": n})
    await inbox.accept("feishu:f1", {"n": "5"})
    await inbox.accept("dingtalk:d1", {"n": "6"})
    wecom = _Recorder("wecom")

    await resume_channels(await inbox.unsettled(), [wecom, _Plain()])

    assert wecom.resumed == [["1", "3"]]  # both of its sources, once, in acceptance order
    unresumable = [(e["source"], e["count"]) for e in log_capture.entries if e["event"] == "inbox_unresumable"]
    assert sorted(unresumable) == [("dingtalk:d1", 1), ("feishu:f1", 2)]  # no resume(); no such channel
    assert inbox.depth() == 6  # nothing settled by the dispatch itself
