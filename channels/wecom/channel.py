"""WeComChannel: every configured self-built app and AI bot behind one `Channel`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from agenthub.channel import ChannelContext
from agenthub.errors import ChannelSendError
from agenthub.messages import OutboundMessage
from agenthub.storage.inbox import InboxEntry
from channels.toolkit.dedup import MessageDedup, open_seen_ids
from channels.toolkit.inbox import resumable
from channels.toolkit.outbound import choose_credential
from channels.toolkit.tasks import TaskSet
from channels.wecom.aibot import BotEndpoint
from channels.wecom.api import WorkApi
from channels.wecom.app import AppEndpoint, handle_callback, handle_verify
from channels.wecom.budget import Clock, Sleep
from channels.wecom.config import load_config
from channels.wecom.media import Inbound

log = structlog.get_logger(__name__)

CALLBACK_PATH = "/wecom/{cred_id}/callback"


class WeComChannel:
    """Self-built apps answer through callbacks + `message/send`; AI bots through their long connection."""

    name = "wecom"

    def __init__(
        self,
        context: ChannelContext,
        config: Mapping[str, Any],
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """`clock` and `sleep` drive the apps' per-member send budgets (tests pass a fake clock)."""
        self.config = load_config(config)
        self._context = context
        self.tasks = TaskSet(self.name)
        inbound = Inbound(self.config.texts_locale, context.settings.media)
        self.apps = {
            cred_id: AppEndpoint(
                cred_id,
                cfg,
                context.gateway,
                self._dedup(f"app-{cred_id}", cred_id),
                self.tasks,
                inbound,
                context.inbox,
                clock=clock,
                sleep=sleep,
                open_sends=context.open_member_sends,
                session_of=context.session_of,
            )
            for cred_id, cfg in self.config.apps.items()
        }
        self.bots = {
            cred_id: BotEndpoint(
                cred_id,
                cfg,
                context.gateway,
                self._dedup(f"bot-{cred_id}", cred_id),
                self.tasks,
                inbound,
                context.inbox,
                context.outbox,
                session_of=context.session_of,
            )
            for cred_id, cfg in self.config.bots.items()
        }
        for bot in self.bots.values():
            named_by = bot.config.names_from_app
            bot.names = self.apps[named_by].names if named_by is not None else None
        if self.apps:
            context.web.add("GET", CALLBACK_PATH, self._verify)
            context.web.add("POST", CALLBACK_PATH, self._callback)
        self._session: aiohttp.ClientSession | None = None
        self._stopped = False

    def _dedup(self, stem: str, cred_id: str) -> MessageDedup:
        """A credential's own dedup memory, `<state_dir>/<stem>.dedup.jsonl`."""
        seen = open_seen_ids(self._context, f"{stem}.dedup.jsonl", ttl_s=self.config.dedup_ttl_s)
        return MessageDedup(seen, channel=self.name, cred_id=cred_id)

    async def start(self) -> None:
        """Check every app's credentials and open every bot's connection (on the instance holding its lease);
        a bad one is logged, not raised."""
        self._session = aiohttp.ClientSession()
        for cred_id, app in self.apps.items():
            cfg = app.config
            app.api = WorkApi(
                self._session,
                base_url=cfg.api_base,
                corp_id=cfg.corp_id,
                secret=cfg.secret.get_secret_value(),
                cred_id=cred_id,
                timeout_s=cfg.request_timeout_s,
                rate_limit_retries=cfg.rate_limit_retries,
                rate_limit_backoff_s=cfg.rate_limit_backoff_s,
            )
        await asyncio.gather(*(self._check_app(app) for app in self.apps.values()))
        for bot in self.bots.values():
            await bot.start(self._session, self._context.leases)
        endpoints: list[AppEndpoint | BotEndpoint] = [*self.apps.values(), *self.bots.values()]
        for endpoint in endpoints:
            endpoint.gate.open()  # what was resumed before the start goes first, then what arrived since

    async def _check_app(self, app: AppEndpoint) -> None:
        assert app.api is not None
        try:
            await app.api.token()
        except ChannelSendError as e:
            log.error("wecom_app_start_failed", cred_id=app.cred_id, error=str(e))
        else:
            log.info("wecom_app_ready", cred_id=app.cred_id, agent_id=app.config.agent_id)

    async def stop(self) -> None:
        """Cancel running turns, close the bots' connections and the HTTP session; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        await self.tasks.close(self.config.stop_grace_s)
        await asyncio.gather(*(bot.stop() for bot in self.bots.values()))
        for app in self.apps.values():
            if app.names is not None:
                await app.names.close()
            app.api = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def can_resume(self, source: str) -> bool:
        """An app's entries: while the channel is not stopped (any instance can `message/send`); a bot's: only
        on the instance holding that bot's connection (its answers go out through it)."""
        if self._stopped:
            return False
        if any(app.gate.source == source for app in self.apps.values()):
            return True
        return any(bot.gate.source == source and bot.holds_connection for bot in self.bots.values())

    async def resume(self, entries: list[InboxEntry]) -> None:
        """Answer the messages a stopped process had stored but not answered (before `start` at a restart: they
        go first in their chats; any time after it for those taken over from a stopped instance)."""
        every: list[AppEndpoint | BotEndpoint] = [*self.apps.values(), *self.bots.values()]
        endpoints = {endpoint.gate.source: endpoint for endpoint in every}
        for source, stored in resumable(entries, endpoints, channel=self.name).items():
            endpoints[source].resume(stored)

    async def send(self, message: OutboundMessage) -> None:
        """Proactive message: `message/send` for an app, `aibot_send_msg` for a bot."""
        endpoints: dict[str, AppEndpoint | BotEndpoint] = {**self.apps, **self.bots}
        endpoint = choose_credential(self.name, message.cred_id, endpoints)
        if isinstance(endpoint, AppEndpoint):
            await endpoint.deliver(message.chat_id, message.content)
        else:
            await endpoint.send(message.chat_id, message.content)

    def _endpoint(self, request: web.Request) -> AppEndpoint:
        app = self.apps.get(request.match_info["cred_id"])
        if app is None:
            raise web.HTTPNotFound(text="unknown cred_id")
        return app

    async def _verify(self, request: web.Request) -> web.StreamResponse:
        return await handle_verify(self._endpoint(request), request)

    async def _callback(self, request: web.Request) -> web.StreamResponse:
        return await handle_callback(self._endpoint(request), request)
