"""Several real `agenthub serve` processes on one deployment, for the daemon-level tests and bench/bench_multi.py.

Each instance has its own data dir, HTTP port and notify socket; all of them share one PostgreSQL database (or,
without a DSN, each keeps its own files) and one fake Messages API, which tells the instances apart by their API
key (`instance_of`). `Deployment` starts them (READY=1 awaited), `kill -9`s, restarts and stops them, keeps every
log, and adds the logs' tails to an exception that leaves it; `Client` spreads HTTP requests over the live
instances (round robin, or random) and reports when a chat request was accepted (its response began: the daemon
stores a message before it answers anything).

    async with Deployment(tmp_path, fake_llm, count=3, dsn=postgres_dsn) as d:
        await d.start_all()
        reply = await d.client().chat("c1", "hello")
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from agenthub.api.sse import Frame, read_frames
from tests.support.cli import cli_env
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, last_user_text
from tests.support.paths import REPO
from tests.support.postgres import free_port

TOKEN = "multi-daemon-test-token-0123456789abcdef"
"""The bearer token every instance accepts (`[http] tokens`): one deployment, one token."""
AGENT = "default"
WARM_UP_CHAT = "warm-up"
"""The chat of each start's warm-up turn (`Deployment.restart`), apart from a test's own chats."""
START_TIMEOUT_S = 90.0
"""A bound on one start (a cold interpreter under a loaded 2-core machine), not a measurement."""
STOP_TIMEOUT_S = 60.0
LOG_TAIL_CHARS = 3000
MESSAGE = re.compile(r"([\w-]+) message (\d+)\b")


def message_text(chat_id: str, n: int) -> str:
    """The content of message `n` of a chat: the fake model and the checks read the chat and number back."""
    return f"{chat_id} message {n}"


def messages_in(body: dict[str, Any]) -> list[tuple[str, int]]:
    """(chat, n) of every `message_text` in the last user turn of a Messages API body, oldest first."""
    return [(chat, int(n)) for chat, n in MESSAGE.findall(last_user_text(body))]


def chat_of(body: dict[str, Any]) -> str | None:
    """The chat a model request is for (its newest message's), for `FakeAnthropic(key_of=chat_of)`."""
    found = messages_in(body)
    return found[-1][0] if found else None


def instance_of(request: RecordedRequest) -> int | None:
    """Which instance sent a request to the fake model (each instance has its own API key)."""
    found = process_of(request)
    return None if found is None else found[0]


def process_of(request: RecordedRequest) -> tuple[int, int] | None:
    """(instance, start) of the process that sent a request to the fake model: each start has its own API key,
    so a call of a killed process is told apart from one of the same instance restarted."""
    key = request.headers.get("x-api-key", "")
    index, _, start = key.removeprefix("instance-").partition(".")
    return (int(index), int(start)) if key.startswith("instance-") and index.isdigit() and start.isdigit() else None


class DaemonError(AssertionError):
    """An instance did not start, or did not stop as asked."""


@dataclass
class Instance:
    """One `agenthub serve` of the deployment; `start()` again after a kill or a stop: same dir, same port."""

    index: int
    root: Path
    port: int
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None
    logs: list[Path] = field(default_factory=list)
    """One file per start (stdout and stderr), oldest first."""
    ready: bool = False
    """READY=1 came from the running process (False again once it is killed or stopped)."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def start_number(self) -> int:
        """1 for the first start, 2 after a restart, ...: the `start` of `process_of`."""
        return len(self.logs)

    async def start(self) -> None:
        """Start the process and wait for its READY=1; `DaemonError` with its log if it exits first."""
        if self.alive:
            raise DaemonError(f"instance {self.index} is already running")
        self.ready = False
        log_path = self.root / f"serve.{len(self.logs) + 1}.log"
        self.logs.append(log_path)
        api_key = f"instance-{self.index}.{self.start_number}"
        notify_path = self.root / "notify.sock"
        notify_path.unlink(missing_ok=True)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            notify.bind(str(notify_path))
            notify.setblocking(False)
            with log_path.open("ab") as log:
                self.process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "agenthub", "serve",
                    env={**self.env, "NOTIFY_SOCKET": str(notify_path), "AGENTHUB_LLM__API_KEY": api_key},
                    cwd=self.root,
                    stdout=log, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
            await self._wait_ready(self.process, notify)
            self.ready = True
        finally:
            notify.close()

    async def _wait_ready(self, process: asyncio.subprocess.Process, notify: socket.socket) -> None:
        ready = asyncio.create_task(_until_ready(notify))
        exited = asyncio.create_task(process.wait())
        try:
            done, _ = await asyncio.wait({ready, exited}, timeout=START_TIMEOUT_S, return_when="FIRST_COMPLETED")
        finally:
            for task in (ready, exited):
                task.cancel()
            await asyncio.gather(ready, exited, return_exceptions=True)
        if ready not in done or ready.cancelled():
            state = f"exited with {process.returncode}" if exited in done else f"not READY in {START_TIMEOUT_S} s"
            raise DaemonError(f"instance {self.index} {state}:\n{self.log_tail()}")

    async def kill(self) -> None:
        """`kill -9`: nothing of the process runs any more, its sockets are closed by the OS."""
        self.ready = False
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()

    async def stop(self) -> int:
        """A clean stop (SIGTERM: the daemon drains and exits); its exit status. Killed if it hangs."""
        self.ready = False
        process = self.process
        if process is None:
            return 0
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                await self.kill()
                raise DaemonError(f"instance {self.index} did not stop in {STOP_TIMEOUT_S} s") from None
        assert process.returncode is not None
        return process.returncode

    def events(self, name: str, *, this_start: bool = False, **fields: Any) -> list[dict[str, Any]]:
        """The JSON log lines whose `event` is `name` and which carry `fields`, oldest first: of every start, or
        of the running (else last) one only."""
        found = []
        for path in self.logs[-1:] if this_start else self.logs:
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if not line.startswith("{"):
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line the kill cut
                if record.get("event") == name and all(record.get(k) == v for k, v in fields.items()):
                    found.append(record)
        return found

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        """The end of every log of this instance, each headed by its file name."""
        parts = []
        for path in self.logs:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = "(no log)"
            parts.append(f"--- instance {self.index}: {path.name}\n{text[-chars:]}")
        return "\n".join(parts)


async def _until_ready(notify: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    while True:
        data = (await loop.sock_recv(notify, 4096)).decode(errors="replace")
        if "READY=1" in data.split("\n"):
            return


class Deployment:
    """`count` instances on one database (`dsn`; None: files, each instance its own) and one fake model.

    `lease_s` is `[store] lease_s` (short, so a dead instance's leases expire within a test); `env` adds settings
    (`AGENTHUB_...`) to every instance. Leaving the `async with` stops every live instance; an exception that
    leaves it carries every instance's log tail as a note."""

    def __init__(
        self,
        root: Path,
        llm: FakeAnthropic,
        *,
        count: int,
        dsn: str | None = None,
        lease_s: float = 2.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.llm = llm
        self.dsn = dsn
        self.lease_s = lease_s
        self.instances = [self._instance(i, env or {}) for i in range(count)]
        self._http: aiohttp.ClientSession | None = None

    def _instance(self, index: int, extra: dict[str, str]) -> Instance:
        root = self.root / f"instance-{index}"
        root.mkdir(parents=True, exist_ok=True)
        env = cli_env(root, None)
        env.update(
            PYTHONPATH=str(REPO),  # the code under test, not an installed copy
            HOME=str(root),
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
            AGENTHUB_HTTP__PORT=str(free_port()),
            AGENTHUB_HTTP__TOKENS=json.dumps([TOKEN]),
            AGENTHUB_LLM__BASE_URL=self.llm.base_url,
            AGENTHUB_LLM__MAX_RETRIES="0",
            AGENTHUB_LLM__TIMEOUT_S="30",
            AGENTHUB_SESSION__FSYNC="false",
            AGENTHUB_STORE__LEASE_S=str(self.lease_s),
            AGENTHUB_LOG_FORMAT="json",
        )
        if self.dsn is not None:
            env.update(AGENTHUB_STORE__BACKEND="postgres", AGENTHUB_STORE__DSN=self.dsn)
        env.update(extra)
        return Instance(index, root, int(env["AGENTHUB_HTTP__PORT"]), env)

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            connector = aiohttp.TCPConnector(limit=0)
            self._http = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120))
        return self._http

    def client(self, *, shuffle: random.Random | None = None) -> Client:
        """An HTTP client over the live instances: round robin, or a random one per request with `shuffle`."""
        return Client(self, shuffle)

    def live(self) -> list[Instance]:
        """The instances that are up: READY, and not killed or stopped since."""
        return [i for i in self.instances if i.ready and i.alive]

    async def start_all(self, *, warm: bool = True) -> None:
        """Start every instance at once and wait until each is READY (and `warm`, see `restart`)."""
        await asyncio.gather(*(self.restart(i.index, warm=warm) for i in self.instances if not i.alive))

    async def kill(self, index: int) -> float:
        """`kill -9` one instance; the monotonic time of the kill."""
        killed_at = time.monotonic()
        await self.instances[index].kill()
        return killed_at

    async def restart(self, index: int, *, warm: bool = True) -> None:
        """Start the instance (again) and wait for READY; `warm`: then one chat (`WARM_UP_CHAT`-<index>), since a
        process's first turn waits for the SDK's import, seconds on a loaded machine, and tests time turns."""
        instance = self.instances[index]
        await instance.start()
        if warm:
            chat = f"{WARM_UP_CHAT}-{index}"
            status, body = await self.client().chat(chat, message_text(chat, instance.start_number), instance)
            if status != 200:
                raise DaemonError(f"instance {index}: the warm-up chat got {status} {body}:\n{instance.log_tail()}")

    async def stop_all(self) -> list[int]:
        """Stop every live instance cleanly, at once; their exit statuses."""
        return list(await asyncio.gather(*(i.stop() for i in self.instances if i.alive)))

    def log_tails(self) -> str:
        return "\n".join(i.log_tail() for i in self.instances)

    async def __aenter__(self) -> Deployment:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if error is not None:
            error.add_note(self.log_tails())
        try:
            await self.stop_all()
        finally:
            for instance in self.instances:
                await instance.kill()
            if self._http is not None:
                await self._http.close()


@dataclass
class Reply:
    """What a chat request got: its HTTP status and, for SSE, the frames (`event`, `data`) it streamed."""

    status: int
    frames: list[Frame] = field(default_factory=list)
    body: Any = None
    cut: bool = False
    """The connection broke before the reply ended (status 0: before it began)."""

    @property
    def final(self) -> Frame | None:
        ends = [f for f in self.frames if f.event in ("done", "error")]
        return ends[-1] if ends else None


@dataclass
class Sent:
    """A chat request in flight on one instance: `accepted` resolves to True once its response began (the
    message is stored: it will be answered), False if it was refused or cut before; `reply` is the rest."""

    chat_id: str
    content: str
    instance: Instance
    accepted: asyncio.Future[bool]
    reply: asyncio.Task[Reply]
    accepted_at: float | None = None


class Client:
    """HTTP requests with the deployment's token, each to the instance asked for, else the next live one."""

    def __init__(self, deployment: Deployment, shuffle: random.Random | None) -> None:
        self.deployment = deployment
        self.shuffle = shuffle
        self._turn = itertools.count()

    def pick(self, among: Sequence[Instance] | None = None) -> Instance:
        live = list(among) if among is not None else self.deployment.live()
        if not live:
            raise DaemonError("no live instance")
        if self.shuffle is not None:
            return self.shuffle.choice(live)
        return live[next(self._turn) % len(live)]

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    async def call(self, method: str, path: str, instance: Instance | None = None, **kw: Any) -> tuple[int, Any]:
        """One request; (status, parsed JSON, else text)."""
        target = instance or self.pick()
        headers = {**self.auth, **kw.pop("headers", {})}
        async with self.deployment.http.request(method, target.base_url + path, headers=headers, **kw) as resp:
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()

    async def chat(self, chat_id: str, content: str, instance: Instance | None = None) -> tuple[int, Any]:
        """A JSON chat request; (status, body)."""
        body = {"chat_id": chat_id, "content": content}
        return await self.call("POST", f"/api/agents/{AGENT}/chat", instance, json=body)

    def send(self, chat_id: str, content: str, instance: Instance | None = None) -> Sent:
        """An SSE chat request left in flight; see `Sent`."""
        target = instance or self.pick()
        accepted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        reply = asyncio.create_task(self._stream(target, chat_id, content, accepted))
        sent = Sent(chat_id, content, target, accepted, reply)
        reply.add_done_callback(lambda _: _settle(accepted, False))
        accepted.add_done_callback(lambda _: _mark_accepted(sent))
        return sent

    async def _stream(self, target: Instance, chat_id: str, content: str, accepted: asyncio.Future[bool]) -> Reply:
        url = f"{target.base_url}/api/agents/{AGENT}/chat?stream=1"
        body = {"chat_id": chat_id, "content": content}
        frames: list[Frame] = []
        status = 0
        try:
            async with self.deployment.http.post(url, json=body, headers=self.auth) as resp:
                status = resp.status
                if resp.status != 200 or resp.content_type != "text/event-stream":
                    _settle(accepted, False)
                    return Reply(resp.status, body=await resp.text())
                _settle(accepted, True)
                async for frame in read_frames(resp.content.iter_any()):
                    if isinstance(frame, Frame):
                        frames.append(frame)
        except aiohttp.ClientError:  # the instance died (kill -9) before or while it answered
            return Reply(status, frames, cut=True)
        return Reply(status, frames)

    async def messages(self, chat_id: str, instance: Instance | None = None) -> list[dict[str, Any]]:
        """The session's history through the messages route of `instance` (else the next live one)."""
        status, body = await self.call("GET", f"/api/agents/{AGENT}/sessions/{chat_id}/messages", instance)
        if status != 200:
            raise AssertionError(f"messages of {chat_id}: {status} {body}")
        messages: list[dict[str, Any]] = body["messages"]
        return messages

    async def wait_metric(self, instance: Instance, name: str, value: float, bound_s: float = 60.0) -> None:
        """Poll `/metrics` (another process: nothing to await) until `name` reads `value`; a bound, not a measure."""
        deadline = time.monotonic() + bound_s
        while (now := await self.metric(instance, name)) != value:
            if time.monotonic() > deadline:
                raise AssertionError(f"instance {instance.index}: {name} stayed {now}, never {value}")
            await asyncio.sleep(0.05)

    async def metric(self, instance: Instance, name: str) -> float:
        status, text = await self.call("GET", "/metrics", instance)
        assert status == 200, text
        for line in str(text).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"no metric {name} on instance {instance.index}")


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _mark_accepted(sent: Sent) -> None:
    if not sent.accepted.cancelled() and sent.accepted.result():
        sent.accepted_at = time.monotonic()
