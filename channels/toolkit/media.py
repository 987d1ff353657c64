"""Size-capped downloads: a platform's media body read in chunks and given up as soon as it passes the cap."""

from __future__ import annotations

import aiohttp

READ_CHUNK_BYTES = 64 * 1024


class BodyTooLarge(Exception):
    """The body passed the cap; `declared` is its Content-Length when that alone said so (nothing was read)."""

    def __init__(self, declared: int | None) -> None:
        super().__init__(f"body larger than the cap (declared size {declared})")
        self.declared = declared


async def read_at_most(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body of `resp`, at most `limit` bytes: refused by its Content-Length before reading, else read in
    chunks and stopped at the first one past `limit` (the rest is never read, so memory stays bounded)."""
    declared = resp.content_length
    if declared is not None and declared > limit:
        raise BodyTooLarge(declared)
    body = bytearray()
    async for chunk in resp.content.iter_chunked(READ_CHUNK_BYTES):
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(None)
    return bytes(body)
