"""AI bot (智能机器人) mode: callbacks from the long connection become turns, replies go back as streams."""

from __future__ import annotations

from typing import Any

import aiohttp
import structlog

from agenthub.channel import Submitter
from agenthub.dedup import DedupStore
from agenthub.errors import ChannelSendError
from agenthub.messages import InboundMessage
from channels.wecom.aibot_conn import BotConnection
from channels.wecom.aibot_stream import StreamReply
from channels.wecom.config import BotConfig
from channels.wecom.tasks import TaskSet
from channels.wecom.text import SUBMIT_FAILED, split_utf8, strip_mention

log = structlog.get_logger(__name__)

EMPTY_PROMPT = "你好，有什么可以帮你？"


class BotEndpoint:
    """One configured AI bot: its connection, dedup memory and per-message stream replies."""

    def __init__(
        self,
        cred_id: str,
        config: BotConfig,
        gateway: Submitter,
        dedup: DedupStore,
        tasks: TaskSet,
    ) -> None:
        self.cred_id = cred_id
        self.config = config
        self._gateway = gateway
        self._dedup = dedup
        self._tasks = tasks
        self.conn: BotConnection | None = None

    def start(self, session: aiohttp.ClientSession) -> None:
        if not self.config.bot_name:
            log.warning(
                "wecom_bot_name_unset",
                cred_id=self.cred_id,
                hint="set bot_name for groups: without it the first @mention is removed, whoever it names",
            )
        self.conn = BotConnection(self.cred_id, self.config, self._on_frame, session)
        self.conn.start()

    async def stop(self) -> None:
        if self.conn is not None:
            await self.conn.stop()

    async def send(self, chat_id: str, text: str) -> None:
        """Proactive push (`aibot_send_msg`, markdown); a per-member chat id `group:user` goes to the group.

        Every push gets a fresh req_id, into groups too, as both official SDKs do.
        """
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
        assert self.conn is not None
        msgid = str(body.get("msgid") or "")
        user = str((body.get("from") or {}).get("userid") or "")
        if not msgid or not user:
            log.warning("wecom_bot_message_malformed", cred_id=self.cred_id, req_id=req_id)
            return
        if await self._is_duplicate(msgid):
            return
        group = body.get("chattype") == "group"
        group_id = str(body.get("chatid") or user)
        reply = StreamReply(self.conn, self.config, req_id, group_id if group else user)
        if not self.config.allows(user):
            log.info("wecom_user_refused", cred_id=self.cred_id, user=user)
            await reply.say(self.config.refusal)
            return
        content = message_text(body)
        if content is None:
            await reply.say(self.config.unsupported)
            return
        if group:
            content = strip_mention(content, self.config.bot_name)
        if not content.strip():
            await reply.say(EMPTY_PROMPT)
            return
        try:
            handle = await self._gateway.submit(self._inbound(body, user, group, content))
        except Exception:  # the user gets a fixed text; the detail goes to the log only
            log.exception("wecom_bot_submit_failed", cred_id=self.cred_id, msgid=msgid)
            await reply.say(SUBMIT_FAILED)
            return
        await reply.run(handle)

    def _inbound(self, body: dict[str, Any], user: str, group: bool, content: str) -> InboundMessage:
        group_id = str(body.get("chatid") or "")
        if not group:
            chat_id = user
        elif self.config.session_per_member:
            chat_id = f"{group_id}:{user}"
        else:
            chat_id = group_id
        metadata: dict[str, Any] = {"chat_type": "group" if group else "private", "mode": "aibot"}
        if group:
            metadata["group_id"] = group_id
        return InboundMessage(
            channel="wecom",
            chat_id=chat_id,
            sender_id=user,
            content=content,
            message_id=str(body["msgid"]),
            agent=self.config.agent,
            cred_id=self.cred_id,
            metadata=metadata,
        )

    async def _is_duplicate(self, key: str) -> bool:
        """True when `key` was handled already (a redelivery); remembers it otherwise."""
        try:
            duplicate = await self._dedup.check_and_add(f"{self.cred_id}:{key}")
        except OSError as e:  # answering beats losing the message; a redelivery is rare
            log.error("wecom_dedup_unavailable", cred_id=self.cred_id, key=key, error=str(e))
            return False
        if duplicate:
            log.info("wecom_duplicate_dropped", cred_id=self.cred_id, key=key)
        return duplicate

    async def _on_event(self, req_id: str, body: dict[str, Any]) -> None:
        assert self.conn is not None
        event = body.get("event") if isinstance(body.get("event"), dict) else {}
        eventtype = str((event or {}).get("eventtype", ""))
        user = str((body.get("from") or {}).get("userid") or "")
        msgid = str(body.get("msgid") or "")
        # events carry a msgid like messages do; a frame without one is identified by its req_id
        if await self._is_duplicate(f"event:msgid:{msgid}" if msgid else f"event:req_id:{req_id}"):
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
    """The text of a text, voice (WeCom's transcript) or mixed message; None for other types."""
    kind = body.get("msgtype")
    if kind == "text":
        return str((body.get("text") or {}).get("content") or "")
    if kind == "voice":
        transcript = (body.get("voice") or {}).get("content")
        return str(transcript) if transcript else None
    if kind == "mixed":
        items = (body.get("mixed") or {}).get("msg_item") or []
        texts = [str(i["text"].get("content", "")) for i in items if i.get("msgtype") == "text" and i.get("text")]
        return "\n".join(texts) if texts else None
    return None
