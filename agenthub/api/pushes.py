"""Proactive messages for HTTP sessions: a per-session SSE feed (`GET …/sessions/{chat_id}/events`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import structlog
from aiohttp import web

from agenthub.api.host import ApiHost
from agenthub.api.requests import agent_of, key_for
from agenthub.api.sse import KEEPALIVE, encode_frame
from agenthub.messages import now_ms

log = structlog.get_logger(__name__)

KEEPALIVE_S = 15.0
QUEUE_MAX = 100
_CLOSED: dict[str, Any] = {}
"""Put into every subscriber's queue when the channel stops, so the feeds end before the server closes."""


class PushFeed:
    """Subscribers per (agent, chat_id); `publish` never waits: a subscriber that falls behind loses pushes."""

    def __init__(self) -> None:
        self._subscribers: dict[tuple[str, str], set[asyncio.Queue[dict[str, Any]]]] = {}

    def publish(self, agent: str, chat_id: str, payload: dict[str, Any]) -> int:
        """Hand `payload` to every open feed of the session; returns how many got it."""
        delivered = 0
        for queue in self._subscribers.get((agent, chat_id), set()):
            try:
                queue.put_nowait(payload)
                delivered += 1
            except asyncio.QueueFull:
                log.warning("http_push_dropped", agent=agent, chat_id=chat_id)
        return delivered

    def subscribers(self, agent: str, chat_id: str) -> int:
        return len(self._subscribers.get((agent, chat_id), ()))

    @contextlib.contextmanager
    def subscribe(self, agent: str, chat_id: str) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_MAX)
        subscribers = self._subscribers.setdefault((agent, chat_id), set())
        subscribers.add(queue)
        try:
            yield queue
        finally:
            subscribers.discard(queue)
            if not subscribers:
                self._subscribers.pop((agent, chat_id), None)

    def close(self) -> None:
        for subscribers in self._subscribers.values():
            for queue in subscribers:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(_CLOSED)


def push_payload(session_key: str, content: str) -> dict[str, Any]:
    return {"session_key": session_key, "role": "assistant", "content": content, "timestamp": now_ms()}


async def stream_events(request: web.Request, host: ApiHost, feed: PushFeed) -> web.StreamResponse:
    """`event: ready` once subscribed, then one `event: push` per proactive message; comments keep it alive."""
    agent = agent_of(request, host)
    key = key_for(agent, request.match_info["chat_id"])
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    with feed.subscribe(agent.name, key.chat_id) as queue:
        await response.prepare(request)
        try:
            await response.write(encode_frame("ready", {"session_key": str(key)}))
            while True:
                try:
                    payload = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(KEEPALIVE)
                    continue
                if payload is _CLOSED:
                    break
                await response.write(encode_frame("push", payload))
        except (ConnectionResetError, RuntimeError):
            log.info("http_events_client_gone", session_key=str(key))
            return response
    await response.write_eof()
    return response
