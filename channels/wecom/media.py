"""Media from WeCom: size-bounded reads, the AI bot's AES-256-CBC media, file names and types, and the replies."""

from __future__ import annotations

import asyncio
import base64
import binascii
import mimetypes
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

import aiohttp
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from agenthub import i18n
from agenthub.config import MediaSettings
from agenthub.messages import Attachment
from channels.toolkit.media import BodyTooLarge, read_at_most

MediaKind = Literal["image", "file"]
BOT_PAD_MAX = 32
"""The AI bot's media are PKCS#7-padded to a multiple of 32 bytes (the official SDKs' `decryptFile`)."""
MIB = 1024 * 1024
_NAME_MAX = 120
_UNSAFE_NAME_CHARS = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|]')
_IMAGE_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


class MediaError(Exception):
    """A picture or file that could not be taken in; the text is for the log, never for the user."""


class MediaTooLarge(MediaError):
    """Larger than `media.max_download_bytes`; `size` is the declared size when the platform said it."""

    def __init__(self, size: int | None) -> None:
        super().__init__(f"media larger than the limit (declared size {size})")
        self.size = size


class MediaDownloadFailed(MediaError):
    """The platform refused the download (errcode, HTTP status), it timed out, or the bytes do not decrypt."""


@dataclass(frozen=True, slots=True)
class Download:
    """The body of one media download with what its headers said about it."""

    data: bytes
    filename: str | None
    content_type: str | None


async def read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body, read in chunks; `MediaTooLarge` as soon as it (or its Content-Length) passes `limit`."""
    try:
        return await read_at_most(resp, limit)
    except BodyTooLarge as e:
        raise MediaTooLarge(e.declared) from None


def disposition_filename(header: str | None) -> str | None:
    """The file name in a Content-Disposition header: `filename*=UTF-8''…` first, else `filename="…"`
    (percent-decoded, as both official AI-bot SDKs read it)."""
    if not header:
        return None
    found = re.search(r"filename\*=UTF-8''([^;\s]+)", header, re.IGNORECASE)
    if found is None:
        found = re.search(r'filename="?([^";]+)"?', header, re.IGNORECASE)
    return unquote(found.group(1)).strip() if found else None


def decrypt_bot_media(data: bytes, aeskey: str) -> bytes:
    """Decrypt an AI-bot media download: AES-256-CBC with key = base64decode(aeskey), iv = the key's first
    16 bytes, PKCS#7 padding of 1..32 bytes; `MediaDownloadFailed` when it does not decrypt."""
    try:
        key = base64.b64decode(aeskey + "=" * (-len(aeskey) % 4))
    except (binascii.Error, ValueError):
        raise MediaDownloadFailed("aeskey is not base64") from None
    if len(key) != 32:
        raise MediaDownloadFailed("aeskey is not 32 bytes")
    if not data or len(data) % 16:
        raise MediaDownloadFailed("ciphertext is not whole AES blocks")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = decryptor.update(data) + decryptor.finalize()
    pad = plain[-1]
    if not 1 <= pad <= BOT_PAD_MAX or pad > len(plain) or plain[-pad:] != bytes([pad]) * pad:
        raise MediaDownloadFailed("bad padding: wrong aeskey or corrupted media")
    return plain[:-pad]


def image_type(data: bytes, declared: str | None) -> str:
    """The image's MIME type from its first bytes, else what the headers declared."""
    for signature, mime in _IMAGE_SIGNATURES:
        if data.startswith(signature):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if declared and declared.startswith("image/"):
        return declared
    return "application/octet-stream"


def file_type(name: str, declared: str | None) -> str:
    """A file's MIME type from its name, else the declared one, else `application/octet-stream`."""
    guessed, _ = mimetypes.guess_type(name)
    if guessed:
        return guessed
    if declared and declared not in ("application/octet-stream", "application/json", "text/plain"):
        return declared
    return "application/octet-stream"


def safe_name(raw: str | None) -> str:
    """A file name without a path, control or reserved characters, at most 120 characters; "" when none is left."""
    base = re.split(r"[/\\]", raw or "")[-1]
    cleaned = _UNSAFE_NAME_CHARS.sub("_", base).strip(" .")
    if len(cleaned) > _NAME_MAX:
        stem, dot, ext = cleaned.rpartition(".")
        cleaned = (stem[: _NAME_MAX - len(ext) - 1] + dot + ext) if dot and len(ext) < 10 else cleaned[:_NAME_MAX]
    return cleaned


def attachment(kind: MediaKind, download: Download, fallback_stem: str) -> Attachment:
    """The `Attachment` for a download: its name (or `fallback_stem` plus the type's extension) and MIME type."""
    content_type = (download.content_type or "").split(";")[0].strip().lower() or None
    name = safe_name(download.filename)
    if kind == "image":
        mime = image_type(download.data, content_type)
        if not name:
            name = safe_name(fallback_stem) + (mimetypes.guess_extension(mime) or "")
        return Attachment("image", name, mime, download.data)
    name = name or safe_name(fallback_stem) or "file"
    return Attachment("file", name, file_type(name, content_type), download.data)


@dataclass(frozen=True, slots=True)
class Inbound:
    """What the endpoints take media in with: the chat's locale (for the replies) and the `[media]` limits."""

    locale: str
    limits: MediaSettings

    def refusal(self, error: MediaError, kind: MediaKind) -> str:
        return refusal(error, kind, self.locale, self.limits.max_download_bytes)

    def unsupported(self, kind: str, configured: str | None) -> str:
        """The operator's `unsupported` text when set, else the catalogue's naming the type."""
        return configured or i18n.text("media.unsupported", self.locale, kind=kind or "?")

    def no_transcript(self) -> str:
        return i18n.text("media.voice_no_transcript", self.locale)


def refusal(error: MediaError, kind: MediaKind, locale: str, limit_bytes: int) -> str:
    """The reply for a picture or file that could not be taken in, in the chat's locale."""
    what = i18n.text(f"media.what.{kind}", locale)
    if isinstance(error, MediaTooLarge):
        size = f"> {megabytes(limit_bytes)}" if error.size is None else megabytes(error.size)
        return i18n.text("media.too_large", locale, what=what, size_mb=size, limit_mb=megabytes(limit_bytes))
    return i18n.text("media.download_failed", locale, what=what)


def megabytes(size: int) -> str:
    """`size` in MB (MiB), one decimal at most: 31457280 → "30", 1572864 → "1.5"."""
    return f"{size / MIB:.1f}".removesuffix(".0")


async def download_bot_media(
    session: aiohttp.ClientSession, url: str, aeskey: str, *, max_bytes: int, timeout_s: float
) -> Download:
    """GET an AI-bot media url (valid five minutes) and decrypt it, within `max_bytes` and `timeout_s`."""
    if not url or not aeskey:
        raise MediaDownloadFailed("the callback carries no media url or aeskey")
    try:
        async with asyncio.timeout(timeout_s), session.get(url) as resp:
            if resp.status != 200:
                raise MediaDownloadFailed(f"HTTP {resp.status}")
            encrypted = await read_bounded(resp, max_bytes + BOT_PAD_MAX)
            filename = disposition_filename(resp.headers.get("Content-Disposition"))
            content_type = resp.headers.get("Content-Type")
    except (aiohttp.ClientError, TimeoutError) as e:
        # never str(e): it carries the url
        raise MediaDownloadFailed(type(e).__name__) from None
    data = decrypt_bot_media(encrypted, aeskey)
    if len(data) > max_bytes:
        raise MediaTooLarge(len(data))
    return Download(data, filename, content_type)
