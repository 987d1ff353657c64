"""A `Submitter` that talks to a running daemon's HTTP API (SSE), so `agenthub chat` can use it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from urllib.parse import quote

import aiohttp
import structlog

from agenthub import i18n
from agenthub.api.codes import reply_code
from agenthub.api.sse import Frame, MalformedFrame, decode_event, read_frames
from agenthub.errors import AgentHubError, AgentNotFoundError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import ErrorCode, ErrorEvent, InboundMessage
from agenthub.session_keys import session_key

log = structlog.get_logger(__name__)

CHANNEL = "http"
"""The daemon's API is its HTTP channel: a remote session is `<agent>:http:<chat_id>`."""
CHECK_TIMEOUT = aiohttp.ClientTimeout(total=15)


class TokenRefusedError(AgentHubError):
    """The daemon answered 401: the API token is missing, wrong or revoked."""


class DaemonUnavailableError(AgentHubError):
    """The daemon could not be reached, or answered something other than what its API documents."""


class RemoteGateway:
    """Submits messages to `POST /api/agents/{agent}/chat?stream=1` on a running daemon.

    The session on the daemon is `<agent>:http:<chat_id>` (the daemon's API is the HTTP channel).
    Use it as an async context manager; it owns one aiohttp session.
    """

    accepting = True
    """The daemon decides; a message sent while it shuts down comes back as its "restarting" error."""

    def __init__(self, base_url: str, token: str, *, default_agent: str, timeout_s: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._default_agent = default_agent
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.locale: str | None = None
        """The terminal's locale, sent as `?lang=`: the daemon answers in it where none is configured."""

    async def __aenter__(self) -> RemoteGateway:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def check(self, agent: str, chat_id: str) -> None:
        """Before a prompt opens or anything is sent: the ids pass the daemon's key rules and it knows `agent`.

        Raises `InvalidIdError`, `AgentNotFoundError`, `TokenRefusedError` or `DaemonUnavailableError`.
        """
        session_key(agent, CHANNEL, chat_id)
        names = await self.agent_names()
        if agent not in names:
            raise AgentNotFoundError(f"unknown agent: {agent} (the daemon has: {', '.join(names) or 'none'})")

    async def agent_names(self) -> list[str]:
        """`GET /api/agents`: the names of the agents the daemon has loaded."""
        assert self._session is not None, "use RemoteGateway as an async context manager"
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with self._session.get(f"{self.base_url}/api/agents", headers=headers, timeout=CHECK_TIMEOUT) as resp:
                if resp.status != 200:
                    _, message = await _error_fields(resp)
                    if resp.status == 401:
                        raise TokenRefusedError(_refused(message))
                    raise DaemonUnavailableError(f"the daemon answered {resp.status}: {message}")
                data = await resp.json(content_type=None)
                return [str(a["name"]) for a in data["agents"]]
        except (aiohttp.ClientError, TimeoutError) as e:
            raise DaemonUnavailableError(_unreachable(self.base_url, e)) from None
        except (ValueError, KeyError, TypeError, RecursionError):
            raise DaemonUnavailableError(f"the daemon at {self.base_url} sent an unexpected agent list") from None

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        agent = message.agent or self._default_agent
        handle = ReplyHandle(f"{agent}:{CHANNEL}:{message.chat_id}")
        task = asyncio.create_task(self._relay(agent, message, handle))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return handle

    async def _relay(self, agent: str, message: InboundMessage, handle: ReplyHandle) -> None:
        assert self._session is not None, "use RemoteGateway as an async context manager"
        url = f"{self.base_url}/api/agents/{agent}/chat?stream=1"
        body = {"chat_id": message.chat_id, "content": message.content}
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "text/event-stream"}
        if self.locale:  # chosen, as in-process (`?lang=`): even the offline reply keeps to it
            url += f"&lang={quote(self.locale)}"
            headers["Accept-Language"] = self.locale
        try:
            async with self._session.post(url, json=body, headers=headers) as resp:
                if resp.status != 200:
                    handle.emit(await _error_event(resp))
                    return
                await _read_events(resp, handle)
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            handle.emit(ErrorEvent(_unreachable(self.base_url, e), code=ErrorCode.UNREACHABLE))
        if not handle.finished:
            handle.emit(ErrorEvent(_said("remote.truncated"), code=ErrorCode.TRUNCATED))

    async def pushes(self, agent: str, chat_id: str) -> AsyncIterator[str]:
        """The session's proactive messages (reminders) from `GET …/sessions/{chat_id}/events`, as they come;
        ends when the daemon closes the feed. Raises `DaemonUnavailableError` when it refuses the feed."""
        assert self._session is not None, "use RemoteGateway as an async context manager"
        url = f"{self.base_url}/api/agents/{agent}/sessions/{quote(chat_id, safe='')}/events"
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "text/event-stream"}
        async with self._session.get(url, headers=headers) as resp:
            if resp.status != 200:
                _, message = await _error_fields(resp)
                raise DaemonUnavailableError(f"the daemon refused the events feed ({resp.status}: {message})")
            async for frame in read_frames(resp.content.iter_any()):
                if isinstance(frame, MalformedFrame):
                    log.warning("push_frame_malformed", reason=frame.reason)
                elif frame.event == "push":
                    yield str(frame.data.get("content", ""))


async def _read_events(resp: aiohttp.ClientResponse, handle: ReplyHandle) -> None:
    """Relay the chat stream's events; a malformed frame ends the reply with a bad-stream error (what came
    before it was already relayed)."""
    async for frame in read_frames(resp.content.iter_any()):
        event = decode_event(frame) if isinstance(frame, Frame) else frame
        if isinstance(event, MalformedFrame):
            log.warning("chat_frame_malformed", reason=event.reason)
            handle.emit(ErrorEvent(_said("remote.bad_stream"), code=ErrorCode.BAD_STREAM))
            return
        if isinstance(event, ErrorEvent) and not event.message:
            event = ErrorEvent(_said("remote.daemon_error"), code=event.code)
        if event is not None:
            handle.emit(event)


async def _error_fields(resp: aiohttp.ClientResponse) -> tuple[str, str]:
    """The daemon's `{"error": {"code", "message"}}` answer as (code, message); ("", reason) if not that shape."""
    try:
        data = await resp.json(content_type=None)
        return str(data["error"].get("code", "")), str(data["error"]["message"])
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, aiohttp.ContentTypeError):
        return "", resp.reason or "request failed"


def _said(key: str, **params: object) -> str:
    """A catalogue text in the terminal's locale (the chat command runs where its user sits)."""
    return i18n.text(key, i18n.system_locale(), **params)


def _refused(message: str) -> str:
    return _said("remote.token_refused", message=message)


def _unreachable(base_url: str, error: BaseException) -> str:
    return _said("remote.unreachable", url=base_url, error=type(error).__name__)


async def _error_event(resp: aiohttp.ClientResponse) -> ErrorEvent:
    """A refused chat request as the reply's error; a bad id or unknown agent keeps the gateway's code."""
    code, message = await _error_fields(resp)
    text = _refused(message) if resp.status == 401 else _said("remote.refused", status=resp.status, message=message)
    return ErrorEvent(text, code=reply_code(code) or f"http_{resp.status}")
