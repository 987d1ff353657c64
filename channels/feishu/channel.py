"""FeishuChannel: Feishu/Lark apps over the long connection or the webhook, replying with streaming cards."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import time
import uuid
from collections.abc import Coroutine, Mapping
from typing import Any

import structlog
from aiohttp import web

from agenthub import i18n
from agenthub.channel import ChannelContext
from agenthub.errors import ChannelSendError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import SENDER_NAME, Attachment, InboundMessage, OutboundMessage, Route
from agenthub.storage.inbox import InboxEntry
from agenthub.web import json_error
from channels.feishu.api import FeishuApi, FeishuApiError
from channels.feishu.config import parse_config
from channels.feishu.inbound import (
    BadEvent,
    FeishuMessage,
    mentions_bot,
    parse_message_event,
    render_text,
    session_chat_id,
)
from channels.feishu.media import TAKEN_TYPES, MediaRefused, download_all, media_refs, unsupported_reply
from channels.feishu.names import app_directory
from channels.feishu.quote import with_quote
from channels.feishu.turn import FeishuApp, run_turn, send_reply, send_safely
from channels.feishu.webhook import Refused, check_request, dispatch, log_refusal, read_body
from channels.toolkit.config import texts_locale
from channels.toolkit.dedup import MessageDedup, open_seen_ids
from channels.toolkit.inbox import InboxGate, Intake, resumable
from channels.toolkit.order import KeyedLock
from channels.toolkit.outbound import choose_credential
from channels.toolkit.tasks import TaskSet

log = structlog.get_logger(__name__)

WEBHOOK_PATH = "/feishu/{cred_id}/events"
TAKE_TIMEOUT_S = 4.0
"""How long the long connection's thread waits for an event to be stored before it lets Feishu deliver it again."""


class FeishuChannel:
    """Every configured Feishu/Lark app; lark-oapi is imported in `start()`, off the event loop."""

    name = "feishu"

    def __init__(self, context: ChannelContext, config: Mapping[str, Any]) -> None:
        self._ctx = context
        self._config = parse_config(config)
        locale = texts_locale(self._config.locale, self.name)
        self._apps = {cred_id: FeishuApp(cred_id, cfg, locale=locale) for cred_id, cfg in self._config.apps.items()}
        for app in self._apps.values():
            if app.config.sender_names:
                app.names = app_directory(app.cred_id, functools.partial(_api_of, app), app.config.sender_name_wait_s)
        seen = open_seen_ids(context, "feishu_dedup.jsonl", ttl_s=self._config.dedup_ttl_s)
        self._replay_window_s = seen.ttl_s
        self._dedup = {cred_id: MessageDedup(seen, channel=self.name, cred_id=cred_id) for cred_id in self._apps}
        self._order = KeyedLock()
        self._tasks = TaskSet(self.name)
        """Events being handled and reactions being added."""
        self._gates = {
            cred_id: InboxGate(
                inbox=context.inbox,
                source=f"feishu:{cred_id}",
                dedup=self._dedup[cred_id],
                tasks=self._tasks,
                gateway=context.gateway,
                admit=functools.partial(self._admit_entry, app),
                finish=functools.partial(self._finish, app),
                deferred_text=i18n.text("channel.deferred", locale),
                order=self._order,
                ready=False,  # opened at the end of `start`: resumed entries go first in their chats
                session_of=context.session_of,
            )
            for cred_id, app in self._apps.items()
        }
        self._process_nonce = uuid.uuid4().hex[:8]
        """In the idempotency keys of replies: a retried send repeats its key, but the answer of an entry resumed by
        the next process is a new message (Feishu would otherwise hand back the dead process's card for 1 h)."""
        self._captured: list[tuple[FeishuApp, dict[str, Any]]] | None = None
        """While a webhook request runs the dispatcher (no await in between): the events it handed over."""
        self._retries = TaskSet(self.name)
        """Start retries of failed apps (`_keep_trying`), ended first on stop."""
        self._retrying: dict[str, asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ws: Any = None
        self._stopped = False
        if any(app.config.mode == "webhook" for app in self._apps.values()):
            context.web.add("POST", WEBHOOK_PATH, self._webhook)

    @property
    def apps(self) -> Mapping[str, FeishuApp]:
        return self._apps

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if not self._apps:
            return
        from channels.feishu.sdk import import_sdk

        await asyncio.to_thread(import_sdk)
        from channels.feishu.ws import WsRunner

        self._ws = WsRunner()
        self._ws.on_failed = self._ws_failed
        first_retry_s = self._config.start_retry_s
        await asyncio.gather(*(self._bring_up(app, retry_in_s=first_retry_s) for app in self._apps.values()))
        await asyncio.to_thread(self._ws.start)
        for app in self._apps.values():
            if app.status == "failed":
                self._retry_later(app)
        ready = [a.cred_id for a in self._apps.values() if a.status == "ready"]
        log.info("feishu_started", ready=ready, failed=[c for c in self._apps if c not in ready])
        for gate in self._gates.values():
            gate.open()  # what was resumed before the start goes first, then what arrived since

    def _retry_later(self, app: FeishuApp) -> None:
        """Start `_keep_trying(app)` unless it runs already (or the channel is stopping)."""
        running = self._retrying.get(app.cred_id)
        if self._stopped or (running is not None and not running.done()):
            return
        self._retrying[app.cred_id] = self._retries.spawn(self._keep_trying(app), name=f"feishu-start-{app.cred_id}")

    async def _keep_trying(self, app: FeishuApp) -> None:
        """Bring a failed app up in the background, with doubling delays: a network or Feishu outage at boot
        must not leave the app down until the next restart (its webhook answers 503 meanwhile, so Feishu
        redelivers what it sends). Only `_retry_later` starts it, so one runs per app at most; it ends only
        when the app is still ready after `ws.start` (a client refused in between failed the app while this
        loop ran, so nothing else would retry it)."""
        delay = self._config.start_retry_s
        while not self._stopped:
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._config.start_retry_max_s)
            if not await self._bring_up(app, retry_in_s=delay):
                continue
            await asyncio.to_thread(self._ws.start)  # no-op unless this is the first long-connection app
            if app.status == "ready":
                return
            # its new long connection was refused meanwhile: `_ws_lost` saw this retry running, so it goes on
            error = "long connection lost right after start"
            log.error("feishu_app_start_failed", cred_id=app.cred_id, error=error, retry_in_s=delay)

    async def _bring_up(self, app: FeishuApp, *, retry_in_s: float) -> bool:
        """One attempt to make `app` ready: its API client, the bot's open_id, its dispatcher and, in
        long-connection mode, a new `ws.Client` (replacing a lost one). On failure the app is `failed`, and
        holds no API client unless it had one already (turns still running may be using it)."""
        from channels.feishu.sdk import build_dispatcher

        cfg = app.config
        created = app.api is None
        try:
            if app.api is None:
                app.api = FeishuApi(
                    cfg.base_url,
                    cfg.app_id,
                    cfg.app_secret,
                    timeout_s=cfg.request_timeout_s,
                    max_retries=cfg.max_retries,
                    card_updates_per_s=cfg.card_updates_per_s,
                    card_update_burst=cfg.card_update_burst,
                )
            app.bot_open_id = await app.api.bot_open_id()
            webhook = cfg.mode == "webhook"
            app.dispatcher = build_dispatcher(
                cfg.secret("encrypt_key") if webhook else "",
                cfg.secret("verification_token") if webhook else "",
                lambda envelope: self._on_event(app, envelope),
                cfg.extra_events,
            )
            if not webhook:
                secret = cfg.app_secret.get_secret_value()
                timeouts = {"endpoint_timeout_s": cfg.request_timeout_s, "dead_after_s": cfg.ws_dead_after_s}
                self._ws.add(app.cred_id, cfg.app_id, secret, cfg.base_url, app.dispatcher, **timeouts)
        except Exception as e:
            app.status = "failed"
            api, app.api = (app.api, None) if created else (None, app.api)
            if api is not None:
                await api.close()
            log.error("feishu_app_start_failed", cred_id=app.cred_id, error=str(e), retry_in_s=retry_in_s)
            return False
        app.status = "ready"
        log.info("feishu_app_ready", cred_id=app.cred_id, mode=cfg.mode, bot_open_id=app.bot_open_id)
        return True

    def _ws_failed(self, cred_id: str, error: str) -> None:
        """Called on the lark-ws thread when an app's long connection is down for good (it could not connect,
        or lost the connection and cannot get it back): the app is failed until a start retry replaces it."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(self._ws_lost, cred_id)

    def _ws_lost(self, cred_id: str) -> None:
        if self._stopped:
            return
        app = self._apps[cred_id]
        app.status = "failed"
        self._retry_later(app)

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        await self._retries.close()
        if self._ws is not None:
            await self._ws.stop()
        await self._tasks.close()
        for app in self._apps.values():
            if app.names is not None:
                await app.names.close()
            if app.api is not None:
                await app.api.close()
        log.info("feishu_stopped")

    # --- receiving ---------------------------------------------------------------------------------

    async def _webhook(self, request: web.Request) -> web.StreamResponse:
        """One Feishu webhook POST: every answer but a dispatched event's is a fixed JSON error."""
        cred_id = request.match_info.get("cred_id", "")
        try:
            app = self._webhook_app(cred_id)
            body = await read_body(request)
            encrypt_key = app.config.secret("encrypt_key")
            check_request(request.headers, body, encrypt_key=encrypt_key, replay_window_s=self._replay_window_s)
            if self._stopped or not self._ctx.gateway.accepting:  # no await from here to the dispatch
                raise Refused(503, "shutdown", "AgentHub is restarting; deliver this event again later", "stopping")
            response, events = self._dispatch_capturing(app, request, body)
            for event_app, envelope in events:
                if await self._take(event_app, envelope):
                    raise Refused(503, "unavailable", "the event could not be stored", "inbox refused the event")
            return response
        except Refused as e:
            log_refusal(cred_id, e)
            return json_error(e.status, e.code, e.message)

    def _dispatch_capturing(
        self, app: FeishuApp, request: web.Request, body: bytes
    ) -> tuple[web.Response, list[tuple[FeishuApp, dict[str, Any]]]]:
        """Run the dispatcher (token check, decryption) and collect the events it hands to `_on_event`, so the
        handler stores them before Feishu gets its 200."""
        captured: list[tuple[FeishuApp, dict[str, Any]]] = []
        self._captured = captured
        try:
            return dispatch(app.dispatcher, request, body), captured
        finally:
            self._captured = None

    def _webhook_app(self, cred_id: str) -> FeishuApp:
        app = self._apps.get(cred_id)
        if app is None or app.config.mode != "webhook":
            raise Refused(404, "not_found", "unknown feishu app", "no webhook app with this cred_id")
        if app.status != "ready" or app.dispatcher is None:
            raise Refused(503, "unavailable", "feishu app not ready", f"app is {app.status}")
        return app

    def _on_event(self, app: FeishuApp, envelope: dict[str, Any]) -> None:
        """Called by the SDK's dispatcher: on the long connection's thread it returns once the event is stored
        (the SDK acks it after that); in a webhook's dispatch it hands the event to the request, which stores it
        before its 200. It raises when the channel is not running, the daemon is shutting down or the event was
        not stored, so the SDK answers 500 and Feishu redelivers the event (about 15 s later, to the restarted
        daemon) instead of it being acked and lost."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._stopped:
            log.warning("feishu_event_refused", cred_id=app.cred_id, reason="channel not running")
            raise RuntimeError("feishu channel is not running")
        if not self._ctx.gateway.accepting:  # shutting down: Feishu redelivers it to the restarted daemon
            log.info("feishu_event_deferred", cred_id=app.cred_id, reason="daemon shutting down")
            raise RuntimeError("AgentHub is restarting; deliver this event again later")
        if _running_loop() is not loop:
            self._take_from_thread(loop, app, envelope)
        elif self._captured is not None:  # the webhook's dispatch, on the loop: its handler stores it
            self._captured.append((app, envelope))
        else:  # on the loop outside a webhook request: it cannot wait here
            self._spawn(self._take(app, envelope), f"feishu-event-{app.cred_id}")

    def _take_from_thread(self, loop: asyncio.AbstractEventLoop, app: FeishuApp, envelope: dict[str, Any]) -> None:
        """On the long connection's thread: store the event on the channel's loop and wait (an fsync, ms) before
        the SDK acks it; raise when it was not stored, so the SDK answers 500 and Feishu redelivers it."""
        try:
            refused = asyncio.run_coroutine_threadsafe(self._take(app, envelope), loop).result(TAKE_TIMEOUT_S)
        except (RuntimeError, concurrent.futures.TimeoutError):  # loop closed, channel stopping, or stuck
            refused = True
        if refused:
            log.warning("feishu_event_refused", cred_id=app.cred_id, reason="not stored")
            raise RuntimeError("the event could not be stored; deliver it again later")

    def _spawn(self, coro: Coroutine[Any, Any, object], name: str) -> None:
        """Run `coro` in the channel's task set; dropped (closed, never awaited) once the channel stops."""
        if self._stopped or self._tasks.closed:
            coro.close()
            return
        self._tasks.spawn(coro, name=name)

    async def _take(self, app: FeishuApp, envelope: dict[str, Any]) -> bool:
        """Dedup and store a message event for `app` (its answer then runs in a task); True when it was refused
        (not stored: Feishu must deliver it again). Events that are not for the bot are dropped here."""
        try:
            msg = parse_message_event(envelope)
        except BadEvent as e:
            log.warning("feishu_bad_event", cred_id=app.cred_id, error=str(e))
            return False
        if not self._addressed(app, msg):
            return False
        try:
            intake = await self._gates[app.cred_id].take(msg.message_id, self._route(app, msg), {"event": envelope})
        except RuntimeError:  # the channel stops
            return True
        return intake is Intake.REFUSED

    def _route(self, app: FeishuApp, msg: FeishuMessage) -> Route:
        """What the event's session is named from: its chat as the app scopes group sessions, the app's agent."""
        chat_id = session_chat_id(msg, app.config.group_session_scope)
        return Route(self.name, chat_id, agent=app.config.agent, cred_id=app.cred_id)

    def can_resume(self, source: str) -> bool:
        """Every instance can answer an app's events (replies go through the API) while the channel is not stopped."""
        return not self._stopped and any(gate.source == source for gate in self._gates.values())

    async def resume(self, entries: list[InboxEntry]) -> None:
        """Answer the events a stopped process had stored but not answered (before `start` at a restart: they go
        first in their chats; any time after it for those taken over from a stopped instance)."""
        apps = {gate.source: self._apps[cred_id] for cred_id, gate in self._gates.items()}
        for source, stored in resumable(entries, apps, channel=self.name).items():
            scope = apps[source].config.group_session_scope
            self._gates[apps[source].cred_id].resume(stored, functools.partial(_stored_chat_id, scope=scope))

    async def _admit_entry(self, app: FeishuApp, entry: InboxEntry) -> ReplyHandle | str | None:
        """Inside the chat's slot: a chat's messages go through media downloads, quote and submit one at a time,
        in arrival order, so a slow download or quote fetch cannot reorder them."""
        msg = _stored_event(entry)
        if msg.message_type not in TAKEN_TYPES:
            return unsupported_reply(msg.message_type, app.locale)
        return await self._submit(app, msg, entry)

    async def _finish(self, app: FeishuApp, entry: InboxEntry, outcome: ReplyHandle | str | None) -> None:
        msg_id = _stored_event(entry).message_id
        key = f"{app.cred_id}:{msg_id}:{self._process_nonce}"
        if app.api is None:
            return
        if isinstance(outcome, str):
            await send_safely(app.api, msg_id, outcome, key)
        elif outcome is not None:
            await run_turn(app, msg_id, outcome, key)

    async def _submit(self, app: FeishuApp, msg: FeishuMessage, entry: InboxEntry) -> ReplyHandle | str | None:
        """Hand a message to the gateway with its images and files (downloaded here, after the ack) and its
        quote; the reply text instead when its media cannot be taken in; None when it holds nothing."""
        assert app.api is not None
        content, refs = render_text(msg, app.bot_open_id), media_refs(msg)
        if not content and not refs:
            log.info("feishu_empty_message", cred_id=app.cred_id, message_id=msg.message_id)
            return None
        if app.names is not None:
            app.names.prefetch(msg.sender_open_id)  # looked up while media and the quote load; cached a day
        if app.config.ack_reaction:
            self._spawn(self._react(app, msg.message_id, app.config.ack_reaction), f"feishu-react-{app.cred_id}")
        media = self._ctx.settings.media
        try:
            attachments = await download_all(app.api, msg.message_id, refs, media)
        except MediaRefused as e:
            return e.reply(app.locale, media.max_download_bytes)
        timeout_s = app.config.quote_timeout_s
        content = await with_quote(app.api, msg, content, bot_open_id=app.bot_open_id, timeout_s=timeout_s)
        inbound = self._inbound(app, msg, entry.id, content, attachments)
        name = await app.names.name(msg.sender_open_id) if app.names is not None else None
        if name:
            inbound.metadata[SENDER_NAME] = name
        handle = await self._ctx.gateway.submit(inbound)
        waited_s = round(time.time() - entry.accepted_at, 4)
        log.info("feishu_submitted", cred_id=app.cred_id, message_id=msg.message_id, waited_s=waited_s)
        return handle

    def _addressed(self, app: FeishuApp, msg: FeishuMessage) -> bool:
        cfg = app.config
        if msg.sender_type == "app" or (app.bot_open_id and msg.sender_open_id == app.bot_open_id):
            return False
        age_s = time.time() - msg.create_time_ms / 1000
        if msg.create_time_ms and age_s > cfg.stale_after_s:
            log.info("feishu_stale_dropped", cred_id=app.cred_id, message_id=msg.message_id, age_s=int(age_s))
            return False
        if cfg.allow_from and not (msg.sender_ids | {msg.chat_id}) & set(cfg.allow_from):
            log.info("feishu_not_allowed", cred_id=app.cred_id, sender=msg.sender_open_id)
            return False
        if msg.is_group and not mentions_bot(msg, app.bot_open_id, mention_all=cfg.respond_to_mention_all):
            log.debug("feishu_group_not_mentioned", cred_id=app.cred_id, message_id=msg.message_id)
            return False
        return True

    def _inbound(
        self, app: FeishuApp, msg: FeishuMessage, inbox_id: str, content: str, attachments: tuple[Attachment, ...]
    ) -> InboundMessage:
        metadata = {
            "inbox_id": inbox_id,
            "chat_type": "group" if msg.is_group else "private",
            "feishu_chat_id": msg.chat_id,
            "message_type": msg.message_type,
            "root_id": msg.root_id,
            "parent_id": msg.parent_id,
            "thread_id": msg.thread_id,
        }
        route = self._route(app, msg)
        return InboundMessage(
            channel=route.channel,
            chat_id=route.chat_id,
            sender_id=msg.sender_open_id or msg.sender_user_id,
            content=content,
            message_id=msg.message_id,
            agent=route.agent,
            cred_id=route.cred_id,
            timestamp=msg.create_time_ms or int(time.time() * 1000),
            metadata=metadata,
            attachments=attachments,
        )

    async def _react(self, app: FeishuApp, message_id: str, emoji: str) -> None:
        assert app.api is not None
        try:
            await app.api.add_reaction(message_id, emoji)
        except FeishuApiError as e:
            log.warning("feishu_reaction_failed", cred_id=app.cred_id, code=e.code)

    # --- proactive sending -------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        app = self._app_for(message.cred_id)
        assert app.api is not None
        key = f"{app.cred_id}:out:{uuid.uuid4().hex}"
        try:
            if message.reply_to:
                await send_reply(app.api, message.reply_to, message.content, key)
                return
            id_type, receive_id = receive_target(message.chat_id)
            from channels.feishu.card import idempotency_key
            from channels.feishu.format import build_content, plan_reply

            for index, (fmt, chunk) in enumerate(plan_reply(message.content or " ")):
                msg_type, content = build_content(fmt, chunk)
                await app.api.create(id_type, receive_id, msg_type, content, idempotency_key(key, str(index)))
        except FeishuApiError as e:
            raise ChannelSendError(f"feishu send to {message.chat_id} failed: code={e.code}") from e

    def _app_for(self, cred_id: str | None) -> FeishuApp:
        ready = {c: a for c, a in self._apps.items() if a.status == "ready" and a.api is not None}
        return choose_credential(self.name, cred_id, ready, what="app")


def _api_of(app: FeishuApp) -> FeishuApi | None:
    return app.api


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _stored_event(entry: InboxEntry) -> FeishuMessage:
    """The message of a stored event (it parsed before it was stored); ValueError when it does not now."""
    try:
        return parse_message_event(entry.payload["event"])
    except BadEvent as e:
        raise ValueError("the stored event is not a message") from e


def _stored_chat_id(entry: InboxEntry, *, scope: Any) -> str:
    return session_chat_id(_stored_event(entry), scope)


def receive_target(chat_id: str) -> tuple[str, str]:
    """`(receive_id_type, receive_id)` for a session chat_id (`oc_…` group, `ou_…` user, `oc_…:ou_…` member)."""
    head = chat_id.split(":", 1)[0]
    if head.startswith("ou_"):
        return "open_id", head
    if head.startswith("on_"):
        return "union_id", head
    if head.startswith("oc_"):
        return "chat_id", head
    return "user_id", head
