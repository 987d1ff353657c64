"""The HTTP server under a client's faults, through raw sockets on 127.0.0.1: half-sent requests time out, a
connection flood is capped (idle connections make room, busy ones are kept), protocol errors are the JSON shape."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import LogCapture

from agenthub.config import Settings
from agenthub.session_keys import session_key
from agenthub.web.http_guard import LimitLog
from tests.support.harness import RunningApi, running_api
from tests.support.http import assert_error

LIVENESS_S = 20.0
"""An upper bound for "eventually" (a server that never closes fails instead of hanging), never a speed measure."""
HALF_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "
CAP = 20


@pytest_asyncio.fixture
async def timed_api(settings_factory: Callable[..., Settings]) -> AsyncIterator[RunningApi]:
    """Short timeouts, and a cap far above what the tests open (so no closing here comes from the cap)."""
    settings = settings_factory(http={"header_timeout_s": 0.5, "body_timeout_s": 0.5, "max_connections": 1000})
    async with running_api(settings) as api:
        yield api


@pytest_asyncio.fixture
async def capped_api(settings_factory: Callable[..., Settings]) -> AsyncIterator[RunningApi]:
    """A small cap, and timeouts far longer than the tests (so no closing here comes from a timeout)."""
    settings = settings_factory(http={"header_timeout_s": 300, "body_timeout_s": 300, "max_connections": CAP})
    async with running_api(settings) as api:
        yield api


class Conn:
    """One raw client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def until_closed(self) -> bytes:
        """Everything the server sends until it closes the connection."""
        async with asyncio.timeout(LIVENESS_S):
            try:
                return await self.reader.read()
            except ConnectionResetError:
                return b""

    def close(self) -> None:
        self.writer.close()


async def _connect(api: RunningApi, data: bytes = b"") -> Conn:
    conn = Conn(*await asyncio.open_connection("127.0.0.1", api.server.port))
    if data:
        await conn.send(data)
    return conn


def _response(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    length = int(headers.get("content-length", len(body)))
    return int(status_line.split()[1]), headers, json.loads(body[:length])


def _post_head(api: RunningApi, length: int) -> bytes:
    return (
        f"POST /api/agents/default/chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode()


async def _eventually(condition: Callable[[], bool]) -> None:
    for _ in range(int(LIVENESS_S / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition never came true")


async def _healthz(api: RunningApi) -> int:
    async with asyncio.timeout(LIVENESS_S), api.client.get(api.base_url + "/healthz") as resp:
        return resp.status


async def test_half_sent_and_silent_connections_are_closed_after_the_header_timeout(timed_api: RunningApi) -> None:
    half = [await _connect(timed_api, HALF_HEAD) for _ in range(30)]
    silent = [await _connect(timed_api) for _ in range(10)]
    answers = await asyncio.gather(*(c.until_closed() for c in half + silent))
    assert answers == [b""] * 40  # closed, nothing answered
    assert await _healthz(timed_api) == 200


async def test_a_head_trickled_byte_by_byte_is_still_cut_off(timed_api: RunningApi) -> None:
    conn = await _connect(timed_api, HALF_HEAD)

    async def trickle() -> None:
        try:
            while True:  # ends when the server closes the connection (or the liveness bound below)
                await conn.send(b"b")  # one header value growing a byte at a time: never too long, never done
                await asyncio.sleep(0.05)
        except (ConnectionError, RuntimeError):
            return

    feeder = asyncio.create_task(trickle())
    try:
        assert await conn.until_closed() == b""
    finally:
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)


async def test_a_body_that_stops_arriving_gets_a_408_and_the_connection_closes(timed_api: RunningApi) -> None:
    conn = await _connect(timed_api, _post_head(timed_api, 200) + b'{"chat_id": "slow", "content": "')
    status, headers, body = _response(await conn.until_closed())
    assert status == 408
    assert headers["content-type"].startswith("application/json")
    assert_error(body, "request_timeout")
    assert not timed_api.gateway.history.exists(session_key("default", "http", "slow"))


async def test_a_keep_alive_connection_serves_requests_then_closes_when_idle(timed_api: RunningApi) -> None:
    conn = await _connect(timed_api)
    for _ in range(3):
        await conn.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(LIVENESS_S):
            head = await conn.reader.readuntil(b"\r\n\r\n")
            status, headers, _ = _response(head + b"{}")
            assert status == 200
            await conn.reader.readexactly(int(headers["content-length"]))
    assert await conn.until_closed() == b""


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nNo colon in this header\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 20_000 + b"\r\n\r\n",
        b"GET /" + b"b" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    ],
)
async def test_a_malformed_request_gets_the_json_400_without_echoing_it(
    timed_api: RunningApi, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    conn = await _connect(timed_api, garbage)
    status, headers, body = _response(await conn.until_closed())
    assert 400 <= status < 500
    assert headers["content-type"].startswith("application/json")
    assert_error(body)
    text = json.dumps(body)
    assert "colon" not in text and "aaaa" not in text and "bbbb" not in text and "nope" not in text
    assert not [r for r in caplog.records if r.exc_info], "a client's malformed request is not a traceback"


async def test_a_client_gone_mid_body_is_one_line_without_a_traceback(
    timed_api: RunningApi, log_capture: LogCapture, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    conn = await _connect(timed_api, _post_head(timed_api, 500) + b'{"chat_id": "gone", ')
    conn.close()
    await _eventually(lambda: any(e["event"] == "http_client_gone" for e in log_capture.entries))
    await asyncio.sleep(0.2)  # anything else the server logs about this request comes now
    [gone] = [e for e in log_capture.entries if e["event"] == "http_client_gone"]
    assert gone["log_level"] == "info" and "exc_info" not in gone
    assert not [e for e in log_capture.entries if e.get("exc_info") or e["log_level"] in ("error", "critical")]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_idle_connections_over_the_cap_make_room_and_healthz_answers(
    capped_api: RunningApi, log_capture: LogCapture
) -> None:
    flood = [await _connect(capped_api, HALF_HEAD if i % 2 else b"") for i in range(3 * CAP)]
    assert await _healthz(capped_api) == 200
    oldest = await asyncio.gather(*(c.until_closed() for c in flood[:CAP]))
    assert oldest == [b""] * CAP  # the longest idle made room
    assert capped_api.server.guard.open <= CAP
    limit_lines = [e for e in log_capture.entries if e["event"] == "http_connection_limit"]
    assert len(limit_lines) == 1 and limit_lines[0]["log_level"] == "warning"
    for conn in flood:
        conn.close()


async def test_busy_connections_are_kept_and_a_new_one_gets_a_503(capped_api: RunningApi) -> None:
    busy = [await _connect(capped_api, _post_head(capped_api, 100) + b'{"chat_id": ') for _ in range(CAP)]
    await _eventually(lambda: capped_api.server.guard.busy == CAP)  # each is inside a handler, reading its body
    refused = await _connect(capped_api)
    status, headers, body = _response(await refused.until_closed())
    assert status == 503 and headers["content-type"].startswith("application/json")
    assert_error(body, "too_many_connections")
    for i, conn in enumerate(busy):  # none of them was cut: each can still finish its request
        await conn.send(f'"b{i}", "content": "hi"}}'.ljust(100 - len('{"chat_id": ')).encode())
    answers = await asyncio.gather(*(conn.until_closed() for conn in busy))
    assert [_response(raw)[0] for raw in answers] == [200] * CAP


def test_the_limit_line_repeats_once_an_interval_with_the_counts_since_the_last(log_capture: LogCapture) -> None:
    now = [0.0]
    limit_log = LimitLog(10, interval_s=60.0, clock=lambda: now[0])
    for second in range(0, 150):  # hit 3 times a second for 150 s
        now[0] = float(second)
        for kind in ("closed_idle", "closed_idle", "refused"):
            limit_log.hit(kind)
    lines = [e for e in log_capture.entries if e["event"] == "http_connection_limit"]
    assert len(lines) == 3  # at 0 s, 60 s and 120 s
    assert lines[0]["closed_idle"] == 1 and "refused" not in lines[0]  # the first hit is logged at once
    assert (lines[1]["closed_idle"], lines[1]["refused"]) == (120, 60)
    assert all(line["max_connections"] == 10 and line["log_level"] == "warning" for line in lines)


async def test_a_declared_length_over_the_body_limit_gets_a_413_at_once(timed_api: RunningApi) -> None:
    """A head declaring more than `http.max_body_bytes` is refused before any body is read (not a 408 after the
    body timeout): the fixture's body timeout is 0.5 s, this answer must come well before it."""
    conn = await _connect(timed_api, _post_head(timed_api, 1_000_000_000_000) + b'{"chat_id": "big", "content": "x"}')
    loop = asyncio.get_running_loop()
    started = loop.time()
    status, headers, body = _response(await conn.until_closed())
    assert status == 413
    assert loop.time() - started < 0.4
    assert headers["content-type"].startswith("application/json")
    assert_error(body, "payload_too_large")
    assert not timed_api.gateway.history.exists(session_key("default", "http", "big"))
