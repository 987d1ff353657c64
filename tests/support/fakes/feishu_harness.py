"""The Feishu channel under test, mounted on a real local HTTP server, and a gateway stand-in that knows /stop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import ErrorEvent, InboundMessage, NoticeEvent, ReplyEvent
from tests.support.fakes.submitter import ScriptedSubmitter

if TYPE_CHECKING:
    from tests.support.fakes.feishu import FakeFeishu


# --- a gateway stand-in that knows /stop ------------------------------------------------------------


@dataclass
class StoppableSubmitter(ScriptedSubmitter):
    """ScriptedSubmitter plus the one gateway behaviour channel tests need: `/stop` aborts the chat's
    running turn, whose handle then ends with `ErrorEvent(code="stopped")`, as the gateway's does."""

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        if message.content.strip() == "/stop":
            for handle in self.handles:
                if not handle.finished and handle.session_key.endswith(f":{message.chat_id}"):
                    handle.emit(ErrorEvent("已停止 (stopped)", code="stopped"))
        return await super().submit(message)


@dataclass
class NoticingSubmitter(ScriptedSubmitter):
    """ScriptedSubmitter whose replies start with the gateway's `notices` (queueing, compaction, fallback)."""

    notices: list[str] = field(default_factory=list)

    def _events(self, text: str) -> list[ReplyEvent]:
        return [*(NoticeEvent(n) for n in self.notices), *super()._events(text)]


# --- the channel under test, mounted on a real local HTTP server --------------------------------------


@dataclass
class Harness:
    channel: Any
    fake: FakeFeishu
    web_url: str

    def events_url(self, cred_id: str) -> str:
        return f"{self.web_url}/feishu/{cred_id}/events"


@asynccontextmanager
async def running_channel(
    fake: FakeFeishu,
    state_dir: Path,
    apps: dict[str, dict[str, Any]],
    gateway: Any,
    settings: dict[str, Any] | None = None,
    inbox: Any = None,
    session_of: Any = None,
    **top: Any,
) -> AsyncIterator[Harness]:
    """Build FeishuChannel from `[channels.feishu]`-shaped config (also the Settings' `channels.feishu`, as the
    daemon passes it; other Settings fields from `settings`), serve its routes, start it, stop it. `inbox`: the
    durable inbox of the context (else one in memory); `session_of`: the context's (a gateway's routing)."""
    from agenthub.channel import ChannelContext, WebRoutes
    from agenthub.config import HTTPSettings, Settings
    from agenthub.web import WebServer
    from channels.feishu import FeishuChannel

    routes = WebRoutes()
    config = {"apps": {cred: {"domain": fake.url, **cfg} for cred, cfg in apps.items()}, **top}
    daemon_settings = Settings.model_construct(channels={"feishu": config}, **(settings or {}))
    ctx = ChannelContext(gateway=gateway, settings=daemon_settings, web=routes, state_dir=state_dir)
    if inbox is not None:  # else the context's own, in memory
        ctx.inbox = inbox
    ctx.session_of = session_of
    channel = FeishuChannel(ctx, config)
    server = WebServer(gateway, host="127.0.0.1", port=0, max_body_bytes=HTTPSettings().max_body_bytes)
    server.mount(routes)  # the daemon's own app: its middlewares decide what a failing handler answers
    await server.start()
    await channel.start()
    try:
        yield Harness(channel, fake, f"http://127.0.0.1:{server.port}")
    finally:
        await channel.stop()
        await server.close()
