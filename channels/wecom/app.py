"""Self-built app (自建应用) mode: verify, decrypt, dedup and store callbacks fast, answer later via `message/send`."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from xml.parsers.expat import ExpatError

import structlog
from aiohttp import web
from wechatpy.enterprise import parse_message
from wechatpy.enterprise.crypto import WeChatCrypto
from wechatpy.exceptions import InvalidSignatureException

from agenthub.channel import SessionResolver, Submitter
from agenthub.errors import ChannelSendError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import SENDER_NAME, Attachment, InboundMessage, Route
from agenthub.storage.inbox import InboxEntry
from agenthub.storage.member_sends import MemberSendsOpener
from agenthub.storage.ports import Inbox
from channels.toolkit.dedup import MessageDedup
from channels.toolkit.inbox import InboxGate, Intake
from channels.toolkit.names import NameDirectory
from channels.toolkit.replay import stale_reason
from channels.toolkit.reply import collect_reply
from channels.toolkit.tasks import TaskSet
from channels.wecom.api import WorkApi, WorkApiError
from channels.wecom.budget import Clock, MemberBudget, OverBudget, Sleep
from channels.wecom.config import AppConfig
from channels.wecom.media import Inbound, MediaError, MediaKind, attachment
from channels.wecom.names import app_directory
from channels.wecom.text import head_with_note, pack_utf8, split_utf8, strip_markdown, utf8_len

log = structlog.get_logger(__name__)

TEXT_LIMIT_BYTES = 2048
MEDIA_TYPES: dict[str, MediaKind] = {"image": "image", "file": "file"}
"""Callback `MsgType`s whose `MediaId` is fetched through `media/get` and handed to the agent."""
WELCOME_EVENTS = frozenset({"enter_agent", "subscribe"})
_QUERY_KEYS = ("msg_signature", "timestamp", "nonce")


class BadCallback(Exception):
    """A callback that cannot be accepted; `status` is the HTTP answer (400 or 403)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class AppEndpoint:
    """One configured self-built app: its callback crypto, dedup memory and reply pipeline."""

    def __init__(
        self,
        cred_id: str,
        config: AppConfig,
        gateway: Submitter,
        dedup: MessageDedup,
        tasks: TaskSet,
        inbound: Inbound,
        inbox: Inbox,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        open_sends: MemberSendsOpener | None = None,
        session_of: SessionResolver | None = None,
    ) -> None:
        """`session_of`: names the session of a callback when it is stored (`ChannelContext.session_of`)."""
        self.cred_id = cred_id
        self.config = config
        self._gateway = gateway
        self._dedup = dedup
        self._media_in = inbound
        self.gate = InboxGate(
            inbox=inbox,
            source=f"wecom:app:{cred_id}",
            dedup=dedup,
            tasks=tasks,
            gateway=gateway,
            admit=self._admit_entry,
            finish=self._finish,
            deferred_text=config.text("channel.deferred"),
            ready=False,  # opened by the channel's start: nothing is answered before its API client exists
            session_of=session_of,
        )
        self._crypto = WeChatCrypto(
            config.token.get_secret_value(), config.encoding_aes_key.get_secret_value(), config.corp_id
        )
        self.api: WorkApi | None = None
        self.names: NameDirectory | None = (
            app_directory(cred_id, lambda: self.api, config.sender_name_wait_s) if config.sender_names else None
        )
        """Members' display names through this app's `user/get` (also the AI bots' whose `names_from_app` it is)."""
        self._sleep = sleep
        windows = [(60.0, config.member_per_minute), (3600.0, config.member_per_hour)]
        self.budget = MemberBudget.opened(f"app-{cred_id}", windows, open_sends, clock=clock, sleep=sleep)
        """Shared by every `message/send` of this app: answers, refusals, welcomes and proactive sends (and, with
        `open_sends` from a shared store, by every instance's)."""

    # ------------------------------------------------------------------ inbound (inside the request)

    def verify_url(self, query: Any) -> str:
        """GET: check the signature over `echostr` and return its plaintext."""
        sig, ts, nonce = _require(query, _QUERY_KEYS)
        echostr = query.get("echostr")
        if not echostr:
            raise BadCallback(400, "missing echostr")
        try:
            return str(self._crypto.check_signature(sig, ts, nonce, echostr))
        except InvalidSignatureException:
            raise BadCallback(403, "bad signature") from None
        except Exception:
            raise BadCallback(400, "echostr does not decrypt") from None

    def open_callback(self, query: Any, body: bytes) -> tuple[Any, str]:
        """POST: signature check, AES decrypt and XML parse through wechatpy; the parsed message and its XML."""
        sig, ts, nonce = _require(query, _QUERY_KEYS)
        try:
            plain = self._crypto.decrypt_message(body, sig, ts, nonce)
        except InvalidSignatureException:
            raise BadCallback(403, "bad signature") from None
        except (ExpatError, KeyError, TypeError, UnicodeDecodeError):
            raise BadCallback(400, "malformed envelope") from None
        except Exception:
            raise BadCallback(400, "payload does not decrypt for this corp_id") from None
        stale = stale_reason(ts, self._dedup.window_s)
        if stale is not None:
            raise BadCallback(403, stale)
        msg = parse_callback(str(plain))
        if msg is None:
            raise BadCallback(400, "malformed message")
        return msg, str(plain)

    async def take(self, msg: Any, plain: str) -> Intake:
        """Dedup and store the callback (its decrypted XML) before WeCom gets its 200; the answer runs in a task.

        Both waits are group-committed fsyncs (milliseconds), well inside WeCom's 5 s; the media is fetched
        after the 200, also when the entry is resumed. `RuntimeError` once the channel stops."""
        return await self.gate.take(dedup_key(msg), self._route(str(msg.source)), {"xml": plain})

    def _route(self, user: str) -> Route:
        """What a callback's session is named from: one chat per user (an app has no group chats)."""
        return Route("wecom", user, agent=self.config.agent, cred_id=self.cred_id)

    def resume(self, entries: list[InboxEntry]) -> None:
        """Answer the callbacks a stopped process had stored but not answered, each user's in order."""
        self.gate.resume(entries, lambda entry: str(_stored_message(entry).source))

    # ------------------------------------------------------------------ the turn (background task)

    async def _admit_entry(self, entry: InboxEntry) -> ReplyHandle | str | None:
        """Inside the user's slot: a user's messages go to the gateway one at a time, in arrival order (a slow
        download holds back only that user's later messages)."""
        msg = _stored_message(entry)
        return await self._admit(msg, str(msg.source), entry.id)

    async def _finish(self, entry: InboxEntry, outcome: ReplyHandle | str | None) -> None:
        """Outside the slot, since a send may wait for the member's budget."""
        user = str(_stored_message(entry).source)
        if isinstance(outcome, ReplyHandle):
            reply = await collect_reply(outcome)  # a joined answer went out with a later message's reply: empty
            outcome = reply.text
        if outcome:
            await self._reply_safely(user, outcome)

    async def _admit(self, msg: Any, user: str, inbox_id: str) -> ReplyHandle | str | None:
        """The submitted message's handle; else the text to answer with (refused, unsupported, a welcome), or
        None for nothing (an event without a welcome)."""
        if raw_type(msg) == "event":
            welcome = str(msg._data.get("Event", "")).lower() in WELCOME_EVENTS and self.config.welcome
            return self.config.welcome if welcome and self.config.allows(user) else None
        if not self.config.allows(user):
            log.info("wecom_user_refused", cred_id=self.cred_id, user=user)
            return self.config.refusal or self.config.text("channel.refusal")
        if self.names is not None:
            self.names.prefetch(user)  # looked up while the media downloads; a cache hit costs nothing
        kind = raw_type(msg)
        if kind in MEDIA_TYPES:
            media = await self._fetch_media(msg, user, MEDIA_TYPES[kind])
            return media if isinstance(media, str) else await self._submit(msg, user, inbox_id, "", (media,))
        content = message_text(msg)
        if content is not None and content.strip():
            return await self._submit(msg, user, inbox_id, content)
        if kind == "voice":
            return self._media_in.no_transcript()
        if content is None:
            return self._media_in.unsupported(kind, self.config.unsupported)
        return None

    async def _fetch_media(self, msg: Any, user: str, kind: MediaKind) -> Attachment | str:
        """The message's media through `media/get`, or the reply telling the user why it could not be taken."""
        api = self.api
        media_id = str(msg._data.get("MediaId") or "")
        limits = self._media_in.limits
        try:
            if api is None or not media_id:
                raise MediaError("no api or no MediaId")
            download = await api.download_media(
                media_id, max_bytes=limits.max_download_bytes, timeout_s=limits.download_timeout_s
            )
        except MediaError as e:
            log.warning("wecom_media_refused", cred_id=self.cred_id, user=user, kind=kind, reason=str(e))
            return self._media_in.refusal(e, kind)
        log.info("wecom_media_received", cred_id=self.cred_id, user=user, kind=kind, size=len(download.data))
        return attachment(kind, download, f"{kind}-{msg.id}")

    async def _submit(
        self, msg: Any, user: str, inbox_id: str, content: str, attachments: tuple[Attachment, ...] = ()
    ) -> ReplyHandle | str:
        """The message's handle, or the fixed text for the user when the gateway refused it."""
        name = await self.names.name(user) if self.names is not None else None
        try:
            return await self._gateway.submit(self._inbound(msg, user, inbox_id, content, attachments, name))
        except Exception:  # the user gets a fixed text; the detail goes to the log only
            log.exception("wecom_app_submit_failed", cred_id=self.cred_id, user=user, key=dedup_key(msg))
            return self.config.text("channel.submit_failed")

    def _inbound(
        self, msg: Any, user: str, inbox_id: str, content: str, attachments: tuple[Attachment, ...], name: str | None
    ) -> InboundMessage:
        route = self._route(user)
        metadata = {"chat_type": "private", "mode": "app", "msg_type": raw_type(msg), "inbox_id": inbox_id}
        if name:
            metadata[SENDER_NAME] = name
        return InboundMessage(
            channel=route.channel,
            chat_id=route.chat_id,
            sender_id=user,
            content=content,
            attachments=attachments,
            message_id=str(msg.id),
            agent=route.agent,
            cred_id=route.cred_id,
            metadata=metadata,
        )

    async def _reply_safely(self, user: str, text: str) -> None:
        try:
            await self.deliver(user, text)
        except ChannelSendError as e:
            errcode = e.errcode if isinstance(e, WorkApiError) else None
            log.error("wecom_reply_failed", cred_id=self.cred_id, user=user, errcode=errcode, error=str(e))

    # ------------------------------------------------------------------ outbound

    async def deliver(self, user: str, text: str) -> int:
        """Send `text` to `user` as ordered parts of at most 2048 bytes; return the number of messages sent.

        Parts go out `part_gap_s` apart (sent back to back, the client may show them out of order), and never
        beyond the member's budget: see `plan_parts`. Raises `MemberBudgetExhausted` when not even one
        message may go within `member_wait_max_s`.
        """
        api = self.api
        if api is None:
            raise ChannelSendError(f"wecom app {self.cred_id} is not started")
        msgtype = "markdown" if self.config.markdown else "text"
        if msgtype == "text" and self.config.strip_markdown:
            text = strip_markdown(text)
        async with self.budget.exclusive(user):
            parts = await self.plan_parts(user, text)
            waited = 0.0
            for i, part in enumerate(parts):
                if i and self.config.part_gap_s:
                    await self._sleep(self.config.part_gap_s)  # injected: tests drive it
                waited += await self._acquire(user, self.config.member_wait_max_s - waited, len(parts), i)
                body = {"touser": user, "agentid": self.config.agent_id, "msgtype": msgtype, msgtype: {"content": part}}
                await api.send_message({**body, "safe": 0})
        return len(parts)

    async def _acquire(self, user: str, within_s: float, parts: int, sent: int) -> float:
        """Count the next part; `MemberBudgetExhausted` when another instance spent the budget the plan saw."""
        try:
            return await self.budget.acquire(user, within_s)
        except OverBudget as e:
            self._log_exhausted(user, parts, sent, 0, e.wait_s)
            raise MemberBudgetExhausted(self.cred_id, user, e.wait_s) from None

    async def plan_parts(self, user: str, text: str) -> list[str]:
        """The messages for `text`, fitted to `max_parts` and to what the member's budget allows.

        More parts than the budget has free now: the text is packed into the fewest 2048-byte parts. Parts
        that could go only after `member_wait_max_s` are held back: the last message that fits carries as
        much of the rest as fits in 2048 bytes, then a note saying what was held back.
        """
        parts = split_utf8(text, TEXT_LIMIT_BYTES)
        if not parts:
            return parts
        waits = await self.budget.waits(user, len(parts))
        if waits[-1] > 0:  # more parts than may go right now: as few as possible
            parts = pack_utf8(text, TEXT_LIMIT_BYTES)
            waits = await self.budget.waits(user, len(parts))
        fit = sum(1 for wait in waits if wait <= self.config.member_wait_max_s)
        if fit == 0:
            self._log_exhausted(user, len(parts), 0, utf8_len(text), waits[0])
            raise MemberBudgetExhausted(self.cred_id, user, waits[0])
        planned, held = self._bounded(parts, fit)
        if fit < min(len(parts), self.config.max_parts):
            self._log_exhausted(user, len(parts), len(planned), held, waits[fit])
        wait = waits[len(planned) - 1]
        if wait > 0:
            log.info(
                "wecom_member_budget_wait", cred_id=self.cred_id, user=user, parts=len(planned), wait_s=round(wait, 1)
            )
        return planned

    def _bounded(self, parts: list[str], fit: int) -> tuple[list[str], int]:
        """At most `max_parts` and at most `fit` messages, and the bytes held back.

        A cut answer's last message carries as much of the rest as fits, then a note saying so.
        """
        cap = min(self.config.max_parts, fit)
        if len(parts) <= cap:
            return parts, 0
        rest = "".join(parts[cap - 1 :])
        if cap < self.config.max_parts:
            per_minute, per_hour = self.config.member_per_minute, self.config.member_per_hour
            last, held = head_with_note(
                rest,
                lambda n: self.config.text("wecom.rate_limited", per_minute=per_minute, per_hour=per_hour, rest=n),
                TEXT_LIMIT_BYTES,
            )
        else:
            last, held = head_with_note(rest, lambda n: self.config.text("wecom.too_long", rest=n), TEXT_LIMIT_BYTES)
            log.warning("wecom_reply_capped", cred_id=self.cred_id, parts=len(parts), dropped_bytes=held)
        return [*parts[: cap - 1], last], held

    def _log_exhausted(self, user: str, parts: int, sent: int, held: int, free_in_s: float) -> None:
        log.warning(
            "wecom_member_budget_exhausted",
            cred_id=self.cred_id,
            user=user,
            parts=parts,
            sent_parts=sent,
            held_back_bytes=held,
            next_free_in_s=round(free_in_s, 1),
        )


class MemberBudgetExhausted(ChannelSendError):
    """Not even one message may go to this member within `member_wait_max_s`: WeCom would drop it."""

    def __init__(self, cred_id: str, user: str, free_in_s: float) -> None:
        self.free_in_s = free_in_s
        super().__init__(
            f"wecom app {cred_id}: the send budget for {user} is used up (WeCom drops more than its per-member "
            f"limit); the next message may go in {free_in_s:.0f} s"
        )


def _require(query: Any, keys: tuple[str, ...]) -> tuple[str, ...]:
    values = tuple(query.get(k) for k in keys)
    if not all(values):
        raise BadCallback(400, "missing " + ", ".join(k for k, v in zip(keys, values, strict=True) if not v))
    return values


def parse_callback(plain: str) -> Any | None:
    """The wechatpy message of a decrypted callback, or None when it is not a message WeCom would send."""
    try:
        msg = parse_message(plain)
        valid = msg is not None and bool(msg.source) and bool(dedup_key(msg))
    except (ExpatError, KeyError, TypeError, AttributeError, ValueError):
        valid = False
    return msg if valid else None


def _stored_message(entry: InboxEntry) -> Any:
    """The message of a stored callback (it was parsed once before it was stored, so it parses again)."""
    msg = parse_callback(str(entry.payload.get("xml", "")))
    if msg is None:
        raise ValueError("the stored callback is not a message")
    return msg


def raw_type(msg: Any) -> str:
    """The callback's `MsgType`, also for types wechatpy does not know (parsed as UnknownMessage)."""
    return str(msg._data.get("MsgType", "")).lower()


def dedup_key(msg: Any) -> str:
    """`MsgId` for messages; sender + CreateTime + event for events (they carry no MsgId)."""
    if raw_type(msg) != "event" and msg.id:
        return f"msg:{msg.id}"
    return f"evt:{msg.source}:{msg.time}:{str(msg._data.get('Event', raw_type(msg))).lower()}"


def message_text(msg: Any) -> str | None:
    """The text to hand to the agent, or None when the type is not supported yet."""
    kind = raw_type(msg)
    if kind == "text":
        return str(msg._data.get("Content") or "")
    if kind == "voice" and msg._data.get("Recognition"):
        return str(msg._data["Recognition"])
    return None


async def handle_verify(endpoint: AppEndpoint, request: web.Request) -> web.Response:
    try:
        echo = endpoint.verify_url(request.query)
    except BadCallback as e:
        log.warning("wecom_verify_rejected", cred_id=endpoint.cred_id, status=e.status, reason=e.reason)
        return web.Response(status=e.status, text=e.reason)
    log.info("wecom_url_verified", cred_id=endpoint.cred_id)
    return web.Response(body=echo.encode("utf-8"), content_type="text/plain")


async def handle_callback(endpoint: AppEndpoint, request: web.Request) -> web.Response:
    if endpoint.api is None:
        return web.Response(status=503, text="not started")
    body = await request.read()
    try:
        msg, plain = endpoint.open_callback(request.query, body)
    except BadCallback as e:
        log.warning("wecom_callback_rejected", cred_id=endpoint.cred_id, status=e.status, reason=e.reason)
        return web.Response(status=e.status, text=e.reason)
    try:
        intake = await endpoint.take(msg, plain)
    except RuntimeError:  # shutting down: let WeCom retry against the next instance
        return web.Response(status=503, text="stopping")
    if intake is Intake.REFUSED:  # not stored: no 200, so WeCom delivers it again
        return web.Response(status=503, text="not stored")
    return web.Response(text="")
