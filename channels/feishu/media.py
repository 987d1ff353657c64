"""Images and files users send on Feishu: which resources a message holds, downloaded into Attachments, and the
reply when a message's media cannot be taken in."""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from typing import Literal

import structlog

from agenthub import i18n
from agenthub.config import MediaSettings
from agenthub.messages import Attachment
from channels.feishu.api import FeishuApi, FeishuApiError, ResourceTooLarge
from channels.feishu.inbound import FeishuMessage, message_content, post_paragraphs

log = structlog.get_logger(__name__)

Kind = Literal["image", "file"]
TAKEN_TYPES = frozenset({"text", "post", "image", "file"})
"""Message types handed to the agent; every other type gets a reply saying it cannot be taken in."""
VOICE_TYPE = "audio"
"""Feishu gives a voice note without a transcript."""
_KIND_NAMES = {"media": "feishu.kind.media", "sticker": "feishu.kind.sticker"}
_WHAT = {"image": "media.what.image", "file": "media.what.file"}
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MediaRef:
    """One image or file a message carries: its key in the message-resource API and a name for it."""

    kind: Kind
    key: str
    name: str = ""


class MediaRefused(Exception):
    """A message's image or file could not be taken in: too large (`size`: its declared bytes, None when the
    download was stopped at the limit) or not downloaded (`size` unused)."""

    def __init__(self, ref: MediaRef, reason: Literal["too_large", "failed"], *, size: int | None = None) -> None:
        super().__init__(f"{ref.kind} {ref.key}: {reason}")
        self.ref = ref
        self.reason = reason
        self.size = size

    def reply(self, locale: str, limit: int) -> str:
        """The text telling the user, in `locale`."""
        what = i18n.text(_WHAT[self.ref.kind], locale)
        if self.reason == "failed":
            return i18n.text("media.download_failed", locale, what=what)
        if self.size is None:
            return i18n.text("feishu.media_over_limit", locale, what=what, limit_mb=_mb(limit))
        return i18n.text("media.too_large", locale, what=what, size_mb=_mb(self.size), limit_mb=_mb(limit))


def media_refs(message: FeishuMessage) -> tuple[MediaRef, ...]:
    """The images and files of an `image`, `file` or `post` message, in the order the user sees them."""
    content = message_content(message)
    if message.message_type == "image":
        return _refs(MediaRef("image", _key(content, "image_key")))
    if message.message_type == "file":
        name = content.get("file_name")
        return _refs(MediaRef("file", _key(content, "file_key"), name if isinstance(name, str) else ""))
    if message.message_type != "post":
        return ()
    _, paragraphs = post_paragraphs(content)
    images = (MediaRef("image", _key(el, "image_key")) for row in paragraphs for el in row if el.get("tag") == "img")
    return _refs(*images)


def unsupported_reply(message_type: str, locale: str) -> str:
    """The reply to a message type AgentHub does not take in (a voice note: that it came without a transcript)."""
    if message_type == VOICE_TYPE:
        return i18n.text("media.voice_no_transcript", locale)
    kind_key = _KIND_NAMES.get(message_type)
    kind = i18n.text(kind_key, locale) if kind_key else message_type or "?"
    return i18n.text("media.unsupported", locale, kind=kind)


async def download_all(
    api: FeishuApi, message_id: str, refs: tuple[MediaRef, ...], media: MediaSettings
) -> tuple[Attachment, ...]:
    """Every ref of one message downloaded, one after the other, all of them together within
    `media.max_download_bytes` (the message is held in memory whole); `MediaRefused` at the first that fails."""
    attachments: list[Attachment] = []
    room = media.max_download_bytes
    for ref in refs:
        if room <= 0:
            raise MediaRefused(ref, "too_large")
        try:
            attachment = await download(api, message_id, ref, media, max_bytes=room)
        except MediaRefused as e:
            if e.reason == "too_large" and room < media.max_download_bytes:  # the message's budget, not its size
                raise MediaRefused(ref, "too_large") from e
            raise
        room -= len(attachment.data)
        attachments.append(attachment)
    return tuple(attachments)


async def download(
    api: FeishuApi, message_id: str, ref: MediaRef, media: MediaSettings, *, max_bytes: int | None = None
) -> Attachment:
    """One image or file as an Attachment, at most `max_bytes` (`media.max_download_bytes`) within
    `media.download_timeout_s`."""
    limit = media.max_download_bytes if max_bytes is None else max_bytes
    try:
        resource = await api.message_resource(
            message_id, ref.key, ref.kind, max_bytes=limit, timeout_s=media.download_timeout_s
        )
    except ResourceTooLarge as e:
        log.warning("feishu_media_too_large", message_id=message_id, kind=ref.kind, size=e.size, limit=e.limit)
        raise MediaRefused(ref, "too_large", size=e.size) from e
    except FeishuApiError as e:
        log.warning("feishu_media_download_failed", message_id=message_id, kind=ref.kind, code=e.code, error=str(e))
        raise MediaRefused(ref, "failed") from e
    mime_type = resource.mime_type or "application/octet-stream"
    if ref.kind == "image":
        return Attachment("image", _image_name(ref.key, mime_type), mime_type, resource.data)
    return Attachment("file", ref.name or resource.file_name or ref.key, mime_type, resource.data)


def _refs(*refs: MediaRef) -> tuple[MediaRef, ...]:
    return tuple(ref for ref in refs if ref.key)


def _key(obj: dict[str, object], name: str) -> str:
    value = obj.get(name)
    return value if isinstance(value, str) else ""


def _image_name(key: str, mime_type: str) -> str:
    """Feishu names an image by its key only: the key plus the extension of its type."""
    extension = mimetypes.guess_extension(mime_type.split(";")[0].strip()) or ""
    return key + (".jpg" if extension in (".jpe", ".jpeg") else extension)


def _mb(size: int) -> str:
    """Bytes as whole MB when round (20 MiB → "20"), else to one decimal ("30.5")."""
    return f"{size / MiB:.1f}".removesuffix(".0")
