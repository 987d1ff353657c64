"""AI bot (智能机器人) mode: callbacks from the long connection become turns, replies go back as streams."""

from __future__ import annotations

from typing import Any

import aiohttp
import structlog

from agenthub.channel import SessionResolver, Submitter
from agenthub.errors import ChannelSendError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import SENDER_NAME, Attachment, InboundMessage, Route
from agenthub.storage.inbox import InboxEntry
from agenthub.storage.ports import Inbox, Outbox
from agenthub.storage.singleton import InstanceLeases, Singleton
from channels.toolkit.dedup import MessageDedup
from channels.toolkit.inbox import InboxGate, Intake
from channels.toolkit.names import NameDirectory
from channels.toolkit.reply import collect_reply
from channels.toolkit.tasks import TaskSet
from channels.wecom.aibot_conn import BotConnection
from channels.wecom.aibot_relay import BotRelay
from channels.wecom.aibot_stream import StreamReply
from channels.wecom.config import BotConfig
from channels.wecom.media import Inbound, MediaError, MediaKind, MediaTooLarge, attachment, download_bot_media
from channels.wecom.text import split_utf8, strip_mention

log = structlog.get_logger(__name__)

MEDIA_TYPES: dict[str, MediaKind] = {"image": "image", "file": "file"}
"""Callback `msgtype`s whose body `{url, aeskey}` is downloaded, decrypted and handed to the agent."""


def bot_lease(cred_id: str) -> str:
    """The lease whose holder alone connects the bot."""
    return f"wecom-bot:{cred_id}"


class Refused(Exception):
    """A message that is answered with `reply` instead of reaching the agent."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


class BotEndpoint:
    """One configured AI bot: its connection, dedup memory and per-message stream replies."""

    def __init__(
        self,
        cred_id: str,
        config: BotConfig,
        gateway: Submitter,
        dedup: MessageDedup,
        tasks: TaskSet,
        inbound: Inbound,
        inbox: Inbox,
        outbox: Outbox | None = None,
        session_of: SessionResolver | None = None,
    ) -> None:
        """`outbox`: the deployment's (postgres), where a push made here goes when another instance holds the
        bot's connection; None: this instance is the only one (files), it pushes itself. `session_of`: names the
        session of a callback when it is stored (`ChannelContext.session_of`)."""
        self.cred_id = cred_id
        self._outbox = outbox
        self.config = config
        self._gateway = gateway
        self._dedup = dedup
        self._tasks = tasks
        self._media_in = inbound
        self.gate = InboxGate(
            inbox=inbox,
            source=f"wecom:bot:{cred_id}",
            dedup=dedup,
            tasks=tasks,
            gateway=gateway,
            admit=self._admit_entry,
            finish=self._finish,
            deferred_text=config.text("channel.deferred"),
            ready=False,  # opened by the channel's start
            session_of=session_of,
        )
        self._live: dict[str, StreamReply] = {}
        """The streams of this process's callbacks (by req_id) whose answer has not started."""
        self._session: aiohttp.ClientSession | None = None
        self.conn: BotConnection | None = None
        self.lease: Singleton | None = None
        """Holds the bot's connection on one instance of the deployment (set by `start`)."""
        self.relay: BotRelay | None = None
        """Pushes to and from the other instances through the outbox (set by `start` when there is one)."""
        self.names: NameDirectory | None = None
        """Senders' display names: the `names_from_app` app's directory (set by the channel); None: the
        callbacks carry only `from.userid` (as the official SDKs type them), so senders are named by it."""

    async def start(self, session: aiohttp.ClientSession, leases: InstanceLeases) -> None:
        """Connect while this instance holds lease `wecom-bot:<cred_id>` (WeCom allows one connection per bot:
        the other instances stand by and take over when the holder stops or dies)."""
        if not self.config.bot_name:
            log.warning(
                "wecom_bot_name_unset",
                cred_id=self.cred_id,
                hint="set bot_name for groups: without it the first @mention is removed, whoever it names",
            )
        self._session = session
        conn = self.conn = BotConnection(self.cred_id, self.config, self._on_frame, session)
        relay = self.relay = self._relay(leases.holder)

        async def connect() -> None:
            conn.start()
            if relay is not None:
                relay.start_drain()  # the pushes other instances stored for this bot go out over our connection

        async def disconnect() -> None:
            if relay is not None:
                await relay.stop_drain()
            await conn.stop()

        self.lease = leases.singleton(bot_lease(self.cred_id), start=connect, stop=disconnect)
        await self.lease.open()

    def _relay(self, holder: str) -> BotRelay | None:
        if self._outbox is None:
            return None
        target = bot_lease(self.cred_id)
        return BotRelay(self.cred_id, target, self.config, self._outbox, holder, self.deliver)

    @property
    def holds_connection(self) -> bool:
        """This instance holds the bot's lease, so its connection is the bot's one."""
        return self.lease is not None and self.lease.running

    async def stop(self) -> None:
        """Close the connection, then release the lease (a standby connects only once ours is closed)."""
        if self.lease is not None:
            await self.lease.close()

    async def send(self, chat_id: str, text: str) -> None:
        """Proactive push: over this instance's connection when it holds the bot's, else through the outbox to
        the instance that does (waiting up to `send_wait_s` for it to go out)."""
        if self.relay is not None and not self.holds_connection:
            await self.relay.send(chat_id, text)
            return
        await self.deliver(chat_id, text)

    async def deliver(self, chat_id: str, text: str) -> None:
        """Push over our connection (`aibot_send_msg`, markdown); a per-member chat id `group:user` goes to the
        group. Every push gets a fresh req_id, into groups too, as both official SDKs do."""
        if self.conn is None:
            raise ChannelSendError(f"wecom bot {self.cred_id} is not started")
        target = chat_id.split(":", 1)[0]
        for part in split_utf8(text, self.config.stream_cap_bytes):
            body = {"chatid": target, "msgtype": "markdown", "markdown": {"content": part}}
            await self.conn.request("aibot_send_msg", body)

    # ------------------------------------------------------------------ inbound frames

    async def _on_frame(self, frame: dict[str, Any]) -> None:
        """Runs on the connection's reader: never waits for the model, only spawns."""
        cmd = frame.get("cmd")
        req_id = str(frame["headers"]["req_id"])
        body = frame.get("body") if isinstance(frame.get("body"), dict) else {}
        assert isinstance(body, dict)
        if self._tasks.closed:
            log.info("wecom_bot_frame_after_stop", cred_id=self.cred_id, cmd=cmd)
        elif cmd == "aibot_msg_callback":
            self._tasks.spawn(self._on_message(req_id, body), name=f"wecom-bot-{self.cred_id}-{req_id}")
        elif cmd == "aibot_event_callback":
            self._tasks.spawn(self._on_event(req_id, body), name=f"wecom-bot-event-{req_id}")
        else:
            log.info("wecom_bot_frame_ignored", cred_id=self.cred_id, cmd=cmd)

    async def _on_message(self, req_id: str, body: dict[str, Any]) -> None:
        """Dedup and store the callback, then answer it in a task. WeCom waits for no ack of a callback (the
        official SDKs send none) and never delivers it again: the stream's first frame is what the user sees, so
        a callback that cannot be stored is answered at once with the fixed "send it again" text."""
        assert self.conn is not None
        msgid = str(body.get("msgid") or "")
        user = str((body.get("from") or {}).get("userid") or "")
        if not msgid or not user:
            log.warning("wecom_bot_message_malformed", cred_id=self.cred_id, req_id=req_id)
            return
        group = body.get("chattype") == "group"
        reply = StreamReply(self.conn, self.config, req_id, str(body.get("chatid") or user) if group else user)
        self._live[req_id] = reply  # before the answer task can look for it
        try:
            payload = {"req_id": req_id, "body": body}
            intake = await self.gate.take(msgid, self._route(body, user, group), payload)
        except BaseException:
            self._live.pop(req_id, None)
            raise
        if intake is not Intake.ACCEPTED:
            self._live.pop(req_id, None)
        if intake is Intake.REFUSED:
            await reply.say(self.config.text("channel.submit_failed"))

    def resume(self, entries: list[InboxEntry]) -> None:
        """Answer the callbacks a stopped process had stored but not answered, each chat's in order; their
        answers go out as proactive messages (the callbacks' streams belonged to the old connection)."""
        self.gate.resume(entries, self._stored_chat_id)

    def _stored_chat_id(self, entry: InboxEntry) -> str:
        body = _mapping(entry.payload.get("body"))
        user = str(_mapping(body.get("from")).get("userid") or "")
        if not user:
            raise ValueError("the stored callback has no sender")
        return self._chat_id(body, user, body.get("chattype") == "group")

    async def _admit_entry(self, entry: InboxEntry) -> ReplyHandle | str | None:
        """Inside the chat's slot: a chat's messages go to the gateway one at a time, in arrival order, so a slow
        download holds back only that chat's later messages."""
        body = _mapping(entry.payload.get("body"))
        user = str(_mapping(body.get("from")).get("userid") or "")
        return await self._admit(body, str(body.get("msgid") or ""), user, body.get("chattype") == "group", entry.id)

    async def _finish(self, entry: InboxEntry, outcome: ReplyHandle | str | None) -> None:
        """Outside the slot (a stream waits for WeCom's acks): on the callback's stream when it is this process's,
        else (a resumed entry) as one proactive message to the chat."""
        reply = self._live.pop(str(entry.payload.get("req_id") or ""), None)
        if reply is not None:
            if isinstance(outcome, ReplyHandle):
                await reply.run(outcome)
            elif outcome is not None:
                await reply.say(outcome)
            return
        text = (await collect_reply(outcome)).text if isinstance(outcome, ReplyHandle) else outcome
        if text:
            try:
                await self.send(self._stored_chat_id(entry), text)
            except ChannelSendError as e:
                log.error("wecom_bot_resumed_reply_failed", cred_id=self.cred_id, entry=entry.id, error=str(e))

    async def _admit(
        self, body: dict[str, Any], msgid: str, user: str, group: bool, inbox_id: str
    ) -> ReplyHandle | str | None:
        """The submitted message's handle; else the one-frame answer (refused, unsupported, empty)."""
        if not self.config.allows(user):
            log.info("wecom_user_refused", cred_id=self.cred_id, user=user)
            return self.config.refusal or self.config.text("channel.refusal")
        if self.names is not None:
            self.names.prefetch(user)  # looked up while the media downloads; a cache hit costs nothing
        try:
            content, attachments = await self._take_in(body, msgid)
        except Refused as e:
            return e.reply
        if group:
            content = strip_mention(content, self.config.bot_name)
        if not content.strip() and not attachments:
            return self.config.text("channel.empty_prompt")
        name = await self.names.name(user) if self.names is not None else None
        try:
            inbound = self._inbound(body, user, group, inbox_id, content, attachments)
            if name:
                inbound.metadata[SENDER_NAME] = name
            return await self._gateway.submit(inbound)
        except Exception:  # the user gets a fixed text; the detail goes to the log only
            log.exception("wecom_bot_submit_failed", cred_id=self.cred_id, msgid=msgid)
            return self.config.text("channel.submit_failed")

    async def _take_in(self, body: dict[str, Any], msgid: str) -> tuple[str, tuple[Attachment, ...]]:
        """The message's text and its downloaded media; raises `Refused` with the reply for the user when the
        type is not taken in, a voice note has no transcript or a download fails (nothing half-submitted)."""
        kind = str(body.get("msgtype") or "")
        if kind in MEDIA_TYPES:
            return "", (await self._download(body.get(kind), MEDIA_TYPES[kind], f"{kind}-{msgid}"),)
        if kind == "mixed":
            listed = _mapping(body.get("mixed")).get("msg_item")
            items = [_mapping(i) for i in listed] if isinstance(listed, list) else []
            texts = [str(_mapping(i.get("text")).get("content") or "") for i in items if i.get("msgtype") == "text"]
            texts = [t for t in texts if t]
            images = [i.get("image") for i in items if i.get("msgtype") == "image"]
            return "\n".join(texts), await self._download_images(images, msgid)
        content = message_text(body)
        if content is not None:
            return content, ()
        if kind == "voice":
            raise Refused(self._media_in.no_transcript())
        raise Refused(self._media_in.unsupported(kind, self.config.unsupported))

    async def _download_images(self, images: list[Any], msgid: str) -> tuple[Attachment, ...]:
        """A mixed message's pictures, one after the other, all of them together within `max_download_bytes`
        (the message is held in memory whole)."""
        media: list[Attachment] = []
        room = self._media_in.limits.max_download_bytes
        for n, image in enumerate(images):
            attachment = await self._download(image, "image", f"image-{msgid}-{n + 1}", max_bytes=room)
            room -= len(attachment.data)
            media.append(attachment)
        return tuple(media)

    async def _download(
        self, content: Any, kind: MediaKind, fallback_stem: str, *, max_bytes: int | None = None
    ) -> Attachment:
        """One `{url, aeskey}` of a callback as an Attachment, bounded by `[media]` (or the `max_bytes` left of the
        message's budget); `Refused` when it fails."""
        found = _mapping(content)
        limits = self._media_in.limits
        budget = limits.max_download_bytes if max_bytes is None else max_bytes
        try:
            if self._session is None:
                raise MediaError("bot not started")
            if budget <= 0:
                raise MediaTooLarge(None)
            download = await download_bot_media(
                self._session,
                str(found.get("url") or ""),
                str(found.get("aeskey") or ""),
                max_bytes=budget,
                timeout_s=limits.download_timeout_s,
            )
        except MediaTooLarge as e:
            # over what is left of the message's budget: its own size is not what was too large
            too_large = e if budget >= limits.max_download_bytes else MediaTooLarge(None)
            log.warning("wecom_media_refused", cred_id=self.cred_id, kind=kind, reason=str(too_large))
            raise Refused(self._media_in.refusal(too_large, kind)) from None
        except MediaError as e:
            log.warning("wecom_media_refused", cred_id=self.cred_id, kind=kind, reason=str(e))
            raise Refused(self._media_in.refusal(e, kind)) from None
        log.info("wecom_media_received", cred_id=self.cred_id, kind=kind, size=len(download.data))
        return attachment(kind, download, fallback_stem)

    def _inbound(
        self,
        body: dict[str, Any],
        user: str,
        group: bool,
        inbox_id: str,
        content: str,
        attachments: tuple[Attachment, ...],
    ) -> InboundMessage:
        group_id = str(body.get("chatid") or "")
        metadata: dict[str, Any] = {"chat_type": "group" if group else "private", "mode": "aibot", "inbox_id": inbox_id}
        if group:
            metadata["group_id"] = group_id
        route = self._route(body, user, group)
        return InboundMessage(
            channel=route.channel,
            chat_id=route.chat_id,
            sender_id=user,
            content=content,
            attachments=attachments,
            message_id=str(body["msgid"]),
            agent=route.agent,
            cred_id=route.cred_id,
            metadata=metadata,
        )

    def _route(self, body: dict[str, Any], user: str, group: bool) -> Route:
        """What a callback's session is named from: its chat (`_chat_id`) and the bot's agent."""
        return Route("wecom", self._chat_id(body, user, group), agent=self.config.agent, cred_id=self.cred_id)

    def _chat_id(self, body: dict[str, Any], user: str, group: bool) -> str:
        """The session's chat id: the user, the group, or `group:user` with `session_per_member`."""
        if not group:
            return user
        group_id = str(body.get("chatid") or "")
        return f"{group_id}:{user}" if self.config.session_per_member else group_id

    async def _on_event(self, req_id: str, body: dict[str, Any]) -> None:
        assert self.conn is not None
        event = body.get("event") if isinstance(body.get("event"), dict) else {}
        eventtype = str((event or {}).get("eventtype", ""))
        user = str((body.get("from") or {}).get("userid") or "")
        msgid = str(body.get("msgid") or "")
        # events carry a msgid like messages do; a frame without one is identified by its req_id
        if await self._dedup.is_duplicate(f"event:msgid:{msgid}" if msgid else f"event:req_id:{req_id}"):
            return
        if eventtype == "enter_chat" and self.config.welcome and self.config.allows(user):
            welcome = {"msgtype": "text", "text": {"content": self.config.welcome}}
            try:
                await self.conn.request("aibot_respond_welcome_msg", welcome, req_id=req_id)
            except ChannelSendError as e:
                log.warning("wecom_bot_welcome_failed", cred_id=self.cred_id, error=str(e))
        else:
            log.info("wecom_bot_event", cred_id=self.cred_id, eventtype=eventtype)


def message_text(body: dict[str, Any]) -> str | None:
    """The text of a text or voice (WeCom's transcript) message; None for other types and a silent voice note."""
    kind = body.get("msgtype")
    if kind == "text":
        return str((body.get("text") or {}).get("content") or "")
    if kind == "voice":
        transcript = (body.get("voice") or {}).get("content")
        return str(transcript) if transcript else None
    return None


def _mapping(value: Any) -> dict[str, Any]:
    """`value` when the callback has an object there, else empty (a malformed body is not a crash)."""
    return value if isinstance(value, dict) else {}
