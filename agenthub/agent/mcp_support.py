"""Pieces of the MCP client that do not need the SDK (so importing the gateway does not import it): naming,
restart backoff, the stderr relay."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

import structlog

log = structlog.get_logger(__name__)
T = TypeVar("T")

STDERR_LINE_MAX = 1 << 16
STDERR_SHOWN_CHARS = 2000
STDERR_DRAIN_S = 1.0


@dataclass(frozen=True)
class RestartBackoff:
    """Delay before restarting a server after `failures` consecutive failed starts or deaths."""

    first_s: float = 1.0
    max_s: float = 60.0

    def delay_s(self, failures: int) -> float:
        return float(min(self.max_s, self.first_s * 2 ** max(0, failures - 1)))


def exposed_name(server: str, tool: str) -> str:
    """`server__tool`, with characters the Messages API does not accept in tool names turned into `_`."""
    return f"{server}__{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"


async def stderr_to_log(stack: contextlib.AsyncExitStack, **names: str) -> TextIO:
    """A pipe for a server's stderr whose lines become `mcp_server_stderr` log lines (so they stay out of a
    terminal `agenthub chat` draws on, and are structured in the daemon's log). Returns the write end; the reader
    ends when every copy of it is closed, or soon after `stack` unwinds."""
    read_fd, write_fd = os.pipe()
    reader = asyncio.StreamReader(limit=STDERR_LINE_MAX)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    task = asyncio.create_task(_log_lines(reader, names))

    async def finish() -> None:
        await asyncio.wait([task], timeout=STDERR_DRAIN_S)  # lines written while the server shuts down
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        transport.close()

    stack.push_async_callback(finish)
    return os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")


async def _log_lines(reader: asyncio.StreamReader, names: dict[str, str]) -> None:
    while True:
        try:
            line = await reader.readline()
        except ValueError:  # a line over the limit: the rest of it is dropped
            continue
        if not line:
            return
        text = line.decode("utf-8", errors="replace").rstrip()
        if text:
            log.info("mcp_server_stderr", line=text[:STDERR_SHOWN_CHARS], **names)


class EventSet(Exception):
    """`unless_set`'s event was set before the awaited call finished."""


async def unless_set(event: asyncio.Event, call: Coroutine[Any, Any, T]) -> T:
    """`call`'s result, unless `event` is set first: then the call is cancelled and `EventSet` raised."""
    running = asyncio.ensure_future(call)
    waiting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait([running, waiting], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
        if not running.done():
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    if running.cancelled():
        raise EventSet
    return running.result()


async def first_of(*events: asyncio.Event) -> None:
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def describe_error(error: BaseException) -> str:
    """The exception's type names (an ExceptionGroup's members too); never its text, which may hold env values."""
    if isinstance(error, BaseExceptionGroup):
        return ",".join(sorted({describe_error(e) for e in error.exceptions}))
    return type(error).__name__
