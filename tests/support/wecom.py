"""Shared WeCom test harnesses and fixtures (registered by tests/channels/wecom/conftest.py): the app and the AI bot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yarl
from aiohttp.test_utils import TestServer

from agenthub.channel import SessionResolver
from agenthub.config import MediaSettings, Settings
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DoneEvent, InboundMessage, ReplyEvent
from agenthub.storage.ports import Inbox
from channels.wecom import WeComChannel
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import (
    FakeAiBotServer,
    FakeQyApi,
    channel_context,
    make_aes_key,
    serve_routes,
    signed_callback,
    text_message_xml,
)
from tests.support.fakes.wecom_limits import FakeClock

CORP_ID = "ww0123456789abcdef"
SECRET = "app-secret-value-1"
TOKEN = "callback-token"
AES_KEY = make_aes_key()
AGENT_ID = 1000002


def app_table(api: FakeQyApi, **extra: Any) -> dict[str, Any]:
    app = {
        "corp_id": CORP_ID,
        "agent_id": AGENT_ID,
        "secret": SECRET,
        "token": TOKEN,
        "encoding_aes_key": AES_KEY,
        "api_base": api.url,
        "agent": "helper",
        "rate_limit_backoff_s": 0.01,
        "part_gap_s": 0,  # tests that look at the gap set their own
        **extra,
    }
    return {"apps": {"hr": app}}


def wecom_settings(table: dict[str, Any], locale: str | None, media: dict[str, Any]) -> tuple[Settings, dict[str, Any]]:
    """The daemon's settings with `table` as `[channels.wecom]` (plus `locale` when given) and `[media]` overrides;
    returns them with the table the channel is built from, the same one as in production."""
    if locale is not None:
        table = {**table, "locale": locale}
    return Settings(channels={"wecom": table}, media=MediaSettings(**media)), table


class Harness:
    def __init__(self, api: FakeQyApi, submitter: ScriptedSubmitter, state_dir: Path) -> None:
        self.api = api
        self.submitter = submitter
        self.state_dir = state_dir
        self.channel: WeComChannel | None = None
        self.server: TestServer | None = None
        self.http = aiohttp.ClientSession()
        self.clock: FakeClock | None = None
        self.locale: str | None = None
        """`[channels.wecom] locale`, set before `start`."""
        self.media: dict[str, Any] = {}
        """`[media]` overrides, set before `start`."""
        self.inbox: Inbox | None = None
        """The durable inbox the channel is built with (None: one in memory), set before `start`."""
        self.session_of: SessionResolver | None = None
        """The context's routing (a gateway's `session_of`), set before `start`."""

    def use_clock(self, clock: FakeClock) -> None:
        """Drive the send budget and the fake API's per-member limit with `clock` (call before `start`)."""
        self.clock = clock
        self.api.clock = clock.now

    async def start(self, **extra: Any) -> WeComChannel:
        settings, table = wecom_settings(app_table(self.api, **extra), self.locale, self.media)
        context = channel_context(self.submitter, self.state_dir, settings, self.inbox)
        context.session_of = self.session_of
        if self.clock is None:
            self.channel = WeComChannel(context, table)
        else:
            self.channel = WeComChannel(context, table, clock=self.clock.now, sleep=self.clock.sleep)
        await self.channel.start()
        self.server = await serve_routes(context)
        return self.channel

    async def restart(self, **extra: Any) -> WeComChannel:
        await self.stop()
        return await self.start(**extra)

    async def stop(self) -> None:
        if self.channel is not None:
            await self.channel.stop()
        if self.server is not None:
            await self.server.close()

    def url(self, cred_id: str = "hr") -> yarl.URL:
        assert self.server is not None
        return self.server.make_url(f"/wecom/{cred_id}/callback")

    async def post(
        self, plaintext: str, *, corrupt_signature: bool = False, sent_at: float | None = None
    ) -> tuple[int, str]:
        query, body = signed_callback(plaintext, token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID, sent_at=sent_at)
        if corrupt_signature:
            query["msg_signature"] = "0" * 40
        async with self.http.post(self.url().with_query(query), data=body) as resp:
            return resp.status, await resp.text()

    async def settle(self) -> None:
        assert self.channel is not None
        await self.channel.tasks.join()


@pytest.fixture
async def api() -> AsyncIterator[FakeQyApi]:
    server = await FakeQyApi(CORP_ID, SECRET).start()
    yield server
    await server.close()


@pytest.fixture
async def harness(api: FakeQyApi, tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(api, ScriptedSubmitter(), tmp_path)
    yield h
    await h.stop()
    await h.http.close()


def text(content: str, msg_id: int = 7001, user: str = "zhangsan") -> str:
    return text_message_xml(corp_id=CORP_ID, user=user, content=content, msg_id=msg_id)


BOT_ID = "aib-0123456789"
BOT_SECRET = "bot-secret-value"


def bot_table(server: FakeAiBotServer, **extra: Any) -> dict[str, Any]:
    bot = {
        "bot_id": BOT_ID,
        "secret": BOT_SECRET,
        "ws_url": server.url,
        "agent": "helper",
        "throttle_s": 0.05,
        "keepalive_s": 5.0,
        "reconnect_min_s": 0.05,
        "reconnect_max_s": 0.2,
        "ack_timeout_s": 1.0,
        "send_wait_s": 3.0,
        **extra,
    }
    return {"bots": {"team": bot}}


class BotHarness:
    def __init__(self, server: FakeAiBotServer, gateway: Any, state_dir: Path) -> None:
        self.server = server
        self.gateway = gateway
        self.state_dir = state_dir
        self.channel: WeComChannel | None = None
        self.locale: str | None = None
        self.media: dict[str, Any] = {}
        self.inbox: Inbox | None = None
        """The durable inbox the channel is built with (None: one in memory), set before `start`."""
        self.session_of: SessionResolver | None = None
        """The context's routing (a gateway's `session_of`), set before `start`."""

    async def start(self, **extra: Any) -> WeComChannel:
        settings, table = wecom_settings(bot_table(self.server, **extra), self.locale, self.media)
        context = channel_context(self.gateway, self.state_dir, settings, self.inbox)
        context.session_of = self.session_of
        self.channel = WeComChannel(context, table)
        await self.channel.start()
        await self.server.wait_for(lambda: self.server.subscribed >= 1)
        return self.channel

    async def settle(self) -> None:
        assert self.channel is not None
        await self.channel.tasks.join()


@pytest.fixture
async def server() -> AsyncIterator[FakeAiBotServer]:
    fake = await FakeAiBotServer(BOT_ID, BOT_SECRET).start()
    yield fake
    await fake.close()


class SteppedGateway:
    """A gateway whose reply events are fed in by the test, one step at a time."""

    accepting = True

    def __init__(self) -> None:
        self.steps: asyncio.Queue[ReplyEvent] = asyncio.Queue()
        self.received: list[InboundMessage] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        self.received.append(message)
        handle = ReplyHandle("helper:wecom:" + message.chat_id)

        async def play() -> None:
            while True:
                event = await self.steps.get()
                handle.emit(event)
                if isinstance(event, DoneEvent):
                    return

        task = asyncio.create_task(play())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return handle


@pytest.fixture
async def stepped(server: FakeAiBotServer, tmp_path: Path) -> AsyncIterator[tuple[BotHarness, SteppedGateway]]:
    gateway = SteppedGateway()
    h = BotHarness(server, gateway, tmp_path)
    yield h, gateway
    if h.channel is not None:
        await h.channel.stop()
