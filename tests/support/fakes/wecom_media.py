"""Media a fake WeCom serves: `cgi-bin/media/get` files and the AI bot's AES-256-CBC encrypted media urls."""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

CHUNK = 256 * 1024


def make_media_aeskey() -> str:
    """A per-message `aeskey`: base64 of 32 random bytes, without the `=` padding (the Python SDK pads it back)."""
    return base64.b64encode(os.urandom(32)).decode().rstrip("=")


def bot_media_encrypt(data: bytes, aeskey: str) -> bytes:
    """What the bot's media url serves: AES-256-CBC, key = base64decode(aeskey), iv = its first 16 bytes,
    PKCS#7 padded to a multiple of 32 bytes (the official SDKs' `decryptFile` accepts pad values 1..32)."""
    key = base64.b64decode(aeskey + "=" * (-len(aeskey) % 4))
    pad = 32 - len(data) % 32
    padded = data + bytes([pad]) * pad
    enc = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return enc.update(padded) + enc.finalize()


def padding_fails(ciphertext: bytes, aeskey: str) -> bool:
    """True when `ciphertext` decrypted under `aeskey` does not end in valid PKCS#7 padding of 1..32 bytes."""
    key = base64.b64decode(aeskey + "=" * (-len(aeskey) % 4))
    dec = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = dec.update(ciphertext) + dec.finalize()
    pad = plain[-1]
    return not 1 <= pad <= 32 or plain[-pad:] != bytes([pad]) * pad


def wrong_key_for(ciphertext: bytes) -> str:
    """Another message's key, one under which `ciphertext` shows itself undecryptable (for about 1 key in 256,
    a wrong key happens to leave valid-looking padding, which no AES-CBC reader can tell from success)."""
    while True:
        key = make_media_aeskey()
        if padding_fails(ciphertext, key):
            return key


@dataclass
class MediaFile:
    """One file as served: `data` on the wire, the headers WeCom sets, `chunked` = no Content-Length."""

    data: bytes
    content_type: str
    disposition: str
    chunked: bool = False


class MediaStore:
    """The files one fake serves by key; counts the body bytes it managed to write for each request.

    `delay_s` holds every answer that long before the headers (a slow platform); `hold`, when set, holds every
    answer until it is set (release many downloads at the same moment); `holds[key]` holds only that file's.
    """

    def __init__(self) -> None:
        self.files: dict[str, MediaFile] = {}
        self.requests: list[str] = []
        self.bytes_sent: dict[str, int] = {}
        self.delay_s = 0.0
        self.hold: asyncio.Event | None = None
        self.holds: dict[str, asyncio.Event] = {}
        self.waiting = 0
        self._arrivals = asyncio.Condition()

    async def wait_held(self, count: int, timeout: float = 5.0) -> None:
        """Wait until `count` requests are held at `hold`."""
        async with asyncio.timeout(timeout), self._arrivals:
            await self._arrivals.wait_for(lambda: self.waiting >= count)

    def put(self, key: str, served: MediaFile) -> None:
        self.files[key] = served

    async def serve(self, request: web.Request, key: str) -> web.StreamResponse:
        self.requests.append(key)
        hold = self.holds.get(key, self.hold)
        if hold is not None:
            self.waiting += 1
            async with self._arrivals:
                self._arrivals.notify_all()
            await hold.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        served = self.files[key]
        resp = web.StreamResponse(
            headers={"Content-Type": served.content_type, "Content-disposition": served.disposition}
        )
        resp.headers["Cache-Control"] = "no-cache, must-revalidate"
        if served.chunked:
            resp.enable_chunked_encoding()
        else:
            resp.content_length = len(served.data)
        await resp.prepare(request)
        self.bytes_sent[key] = 0
        try:
            for start in range(0, len(served.data), CHUNK):
                await resp.write(served.data[start : start + CHUNK])
                self.bytes_sent[key] += min(CHUNK, len(served.data) - start)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):  # the client stopped reading and hung up
            pass
        return resp


def app_disposition(filename: str) -> str:
    """`media/get`'s header: `attachment; filename="…"` (non-ASCII names percent-encoded)."""
    return f'attachment; filename="{quote(filename)}"'


def bot_disposition(filename: str) -> str:
    """The bot media url's header, in the RFC 5987 form both SDKs look for first."""
    return f"attachment; filename*=UTF-8''{quote(filename)}"
