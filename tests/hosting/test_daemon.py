"""The daemon as a real subprocess: sd_notify readiness, SIGTERM drain, restart, SIGKILL, second instance."""

from __future__ import annotations

import asyncio
import io
import json
import os
import resource
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from agenthub.channel import ChannelContext, WebRoutes
from agenthub.cli.chat import UsageWatch
from agenthub.config import load_settings
from agenthub.hosting.remote import RemoteGateway
from agenthub.messages import ErrorEvent, InboundMessage
from agenthub.session.history import SessionHistory
from agenthub.session_keys import session_key
from agenthub.storage.jsonl import read_records
from agenthub.storage.tokens import TokenStore
from channels.terminal import CliChannel
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.paths import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DaemonEnv:
    root: Path
    env: dict[str, str]
    port: int
    token: str
    notify: socket.socket
    started: list[asyncio.subprocess.Process] = field(default_factory=list)
    """Every daemon `start` made: the fixture ends those still running, also when the test failed."""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def start(self, *, fd_limit: int | None = None) -> asyncio.subprocess.Process:
        """`agenthub serve` in a subprocess; `fd_limit` sets its RLIMIT_NOFILE (soft and hard) before it starts."""

        def limit_fds() -> None:
            if fd_limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agenthub", "serve", env=self.env, cwd=self.root,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=limit_fds,
        )  # fmt: skip
        self.started.append(proc)
        return proc

    async def wait_notify(self, expected: str, timeout: float = 20.0) -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            while True:
                data = (await loop.sock_recv(self.notify, 4096)).decode()
                if expected in data.split("\n"):
                    return


@pytest_asyncio.fixture
async def daemon_env(tmp_path: Path, fake_llm: FakeAnthropic) -> AsyncIterator[DaemonEnv]:
    notify_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    sock.setblocking(False)
    port = _free_port()
    token = TokenStore(tmp_path / "auth").create("test")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(REPO),  # the daemon runs the code under test, not an installed copy
        "HOME": str(tmp_path),
        "NO_PROXY": "127.0.0.1,localhost",
        "NOTIFY_SOCKET": str(notify_path),
        "AGENTHUB_DATA_DIR": str(tmp_path / "data"),
        "AGENTHUB_AGENTS_DIR": str(tmp_path / "agents"),
        "AGENTHUB_AUTH_DIR": str(tmp_path / "auth"),
        "AGENTHUB_WORKSPACE_DIR": str(tmp_path / "workspace"),
        "AGENTHUB_HTTP__PORT": str(port),
        "AGENTHUB_LLM__BASE_URL": fake_llm.base_url,
        "AGENTHUB_LLM__API_KEY": "test-key",
        "AGENTHUB_LLM__RETRY_BASE_S": "0.01",
        "AGENTHUB_SESSION__FSYNC": "false",
    }
    daemon_env = DaemonEnv(tmp_path, env, port, token, sock)
    try:
        yield daemon_env
    finally:
        sock.close()
        for proc in daemon_env.started:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def _chat(env: DaemonEnv, chat_id: str, content: str) -> dict[str, object]:
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            env.base + "/api/agents/default/chat", json={"chat_id": chat_id, "content": content}, headers=env.auth
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()
        body: dict[str, object] = await resp.json()
        return body


async def _stop(proc: asyncio.subprocess.Process) -> int:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(proc.wait(), 20)


async def _agent_names(env: DaemonEnv) -> list[str]:
    async with aiohttp.ClientSession() as client, client.get(env.base + "/api/agents", headers=env.auth) as resp:
        return [a["name"] for a in (await resp.json())["agents"]]


async def test_ready_watchdog_reload_sigterm_drain_and_restart(daemon_env: DaemonEnv, fake_llm: FakeAnthropic) -> None:
    daemon_env.env["WATCHDOG_USEC"] = "1000000"
    proc = await daemon_env.start()
    try:
        await daemon_env.wait_notify("READY=1")
        await daemon_env.wait_notify("WATCHDOG=1", timeout=5)

        assert await _agent_names(daemon_env) == ["default"]
        write_agent(daemon_env.root / "agents", "reviewer", {"description": "reviews"})
        proc.send_signal(signal.SIGHUP)  # systemctl reload: agent definitions are read again
        for _ in range(50):
            if "reviewer" in await _agent_names(daemon_env):
                break
            await asyncio.sleep(0.1)
        assert await _agent_names(daemon_env) == ["default", "reviewer"]

        fake_llm.script(reply_text("first answer"))
        assert (await _chat(daemon_env, "c1", "remember the number 42"))["reply"] == "first answer"

        fake_llm.script(reply_text("slow answer", first_byte_delay_s=1.0))
        slow = asyncio.create_task(_chat(daemon_env, "c1", "a slow question"))
        await fake_llm.wait_for_requests(2)
        proc.send_signal(signal.SIGTERM)
        await daemon_env.wait_notify("STOPPING=1")
        assert (await slow)["reply"] == "slow answer"  # the running turn was drained, not cut
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        await _stop(proc)

    proc = await daemon_env.start()
    try:
        await daemon_env.wait_notify("READY=1")
        fake_llm.script(reply_text("third answer"))
        await _chat(daemon_env, "c1", "what number?")
        body = fake_llm.message_requests()[-1].body
        assert body is not None
        sent = body["messages"]
        texts = [str(m["content"]) for m in sent]
        assert any("remember the number 42" in t for t in texts)
        assert any("slow answer" in t for t in texts)
    finally:
        assert await _stop(proc) == 0


async def _run_chat(
    env: DaemonEnv, *args: str, token: str | None, extra_env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    environ = {**env.env, **({"AGENTHUB_TOKEN": token} if token else {}), **(extra_env or {})}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "chat", *args, env=environ, cwd=env.root,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_second_daemon_is_refused_and_chat_connects(daemon_env: DaemonEnv, fake_llm: FakeAnthropic) -> None:
    first = await daemon_env.start()
    try:
        await daemon_env.wait_notify("READY=1")
        second = await daemon_env.start()
        _, refusal = await asyncio.wait_for(second.communicate(), 20)
        assert second.returncode == 3
        assert b"already running" in refusal

        code, out, err = await _run_chat(daemon_env, "-m", "hello daemon", token=None)
        assert code == 2 and "AGENTHUB_TOKEN" in err
        fake_llm.script(reply_text("answered by the daemon"))
        code, out, err = await _run_chat(daemon_env, "-m", "hello daemon", "--chat-id", "term", token=daemon_env.token)
        assert code == 0, err
        assert out.strip() == "answered by the daemon"
        async with (
            aiohttp.ClientSession() as client,
            client.get(daemon_env.base + "/api/agents/default/sessions/term/messages", headers=daemon_env.auth) as resp,
        ):
            messages = (await resp.json())["messages"]
        assert [m["content"] for m in messages] == ["hello daemon", "answered by the daemon"]
        await _connect_mode_refuses_bad_input_up_front(daemon_env, fake_llm)
        await _daemon_refusals_keep_the_gateway_codes(daemon_env)
    finally:
        assert await _stop(first) == 0


async def _connect_mode_refuses_bad_input_up_front(env: DaemonEnv, fake_llm: FakeAnthropic) -> None:
    """Exit 2 with one line, as without a daemon, and before a prompt opens or anything is sent."""
    sent = len(fake_llm.message_requests())
    unknown, bad_id, repl, bad_token, bound = await asyncio.gather(
        _run_chat(env, "-m", "hi", "--agent", "nope", token=env.token),
        _run_chat(env, "-m", "hi", "--chat-id", "a/b", token=env.token),
        _run_chat(env, "--agent", "nope", token=env.token),  # REPL mode: no prompt opens
        _run_chat(env, "-m", "hi", token="ahk_not-a-token"),
        _run_chat(env, "-m", "hi", token=env.token, extra_env={"AGENTHUB_BINDINGS__CLI": "nope"}),  # bindings apply
    )
    for code, out, err in (unknown, bad_id, repl, bad_token, bound):
        assert (code, out) == (2, ""), err
        assert len(err.strip().splitlines()) == 1, err
    assert unknown[2] == repl[2] == bound[2] == "agenthub chat: unknown agent: nope (the daemon has: default)\n"
    assert bad_id[2] == "agenthub chat: chat_id contains a path separator\n"
    assert bad_token[2].startswith("agenthub chat: the daemon refused the token (")
    assert len(fake_llm.message_requests()) == sent


async def _daemon_refusals_keep_the_gateway_codes(env: DaemonEnv) -> None:
    """Should the daemon still refuse a message (an agent removed after the check), -m exits 2, not 1."""
    async with RemoteGateway(env.base, env.token, default_agent="default") as remote:
        watch = UsageWatch(remote)
        state_dir = env.root / "cli-state"
        settings = load_settings(None, data_dir=env.root / "data", auth_dir=env.root / "auth")
        context = ChannelContext(gateway=watch, settings=settings, web=WebRoutes(), state_dir=state_dir)
        channel = CliChannel(context, {"agent": "nope"})
        err = io.StringIO()
        assert await channel.ask("hi", stdout=io.StringIO(), stderr=err) == 1
        refused = await watch.usage_error()
        assert refused is not None and refused.code == "unknown_agent"
        assert err.getvalue() == "error: the daemon answered 404: no agent named 'nope'\n"
        bad_id = await (await remote.submit(InboundMessage("cli", "a/b", "local", "hi"))).result()
        assert isinstance(bad_id, ErrorEvent) and bad_id.code == "invalid_id"


async def test_sigkill_during_load_then_restart(daemon_env: DaemonEnv, fake_llm: FakeAnthropic) -> None:
    daemon_env.env["AGENTHUB_SESSION__FSYNC"] = "true"
    proc = await daemon_env.start()
    await daemon_env.wait_notify("READY=1")

    async def hammer(i: int) -> None:
        for turn in range(1000):
            try:
                await _chat(daemon_env, f"k{i}", f"message {turn}")
            except (aiohttp.ClientError, AssertionError):
                return

    workers = [asyncio.create_task(hammer(i)) for i in range(8)]
    await fake_llm.wait_for_requests(40, timeout_s=60)  # a cold process: the first calls wait for the SDK's import
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    await asyncio.gather(*workers)

    history = SessionHistory(daemon_env.root / "data")
    for i in range(8):
        key = session_key("default", "http", f"k{i}")
        records = read_records(history.layout("default").history_file(key))
        for record in records:
            assert record["role"] in ("user", "assistant") and isinstance(record["content"], str)
    proc = await daemon_env.start()
    try:
        await daemon_env.wait_notify("READY=1")
        for i in range(8):
            await _chat(daemon_env, f"k{i}", "after the crash")
    finally:
        assert await _stop(proc) == 0


@pytest.mark.skipif(not Path("/usr/bin/systemd-analyze").exists(), reason="systemd-analyze is not installed")
async def test_systemd_unit_verifies() -> None:
    unit = REPO / "systemd" / "agenthub.service"
    proc = await asyncio.create_subprocess_exec(
        "systemd-analyze", "verify", str(unit), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    problems = [
        line for line in err.decode().splitlines() if "agenthub.service" in line and "not executable" not in line
    ]
    assert not problems, problems


async def _lines(stream: asyncio.StreamReader | None, into: list[str]) -> None:
    """Read a subprocess's output as it comes, so a chatty daemon never blocks on a full pipe."""
    assert stream is not None
    async for raw in stream:
        into.append(raw.decode(errors="replace"))


FLOOD_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "


@pytest.mark.parametrize("max_connections", [None, 100_000], ids=["derived-cap", "cap-above-the-fd-limit"])
async def test_a_connection_flood_under_a_low_fd_limit_leaves_healthz_answering_and_the_log_quiet(
    daemon_env: DaemonEnv, max_connections: int | None
) -> None:
    daemon_env.env["AGENTHUB_HTTP__HEADER_TIMEOUT_S"] = "300"  # the flood is held for the whole test
    if max_connections is not None:  # accept() itself runs out of descriptors
        daemon_env.env["AGENTHUB_HTTP__MAX_CONNECTIONS"] = str(max_connections)
    proc = await daemon_env.start(fd_limit=256)
    out: list[str] = []
    readers = [asyncio.create_task(_lines(proc.stdout, out)), asyncio.create_task(_lines(proc.stderr, out))]
    flood: list[asyncio.StreamWriter] = []
    try:
        await daemon_env.wait_notify("READY=1")
        for _ in range(600):  # far more half-sent requests than the daemon has descriptors
            _, writer = await asyncio.open_connection("127.0.0.1", daemon_env.port)
            writer.write(FLOOD_HEAD)
            flood.append(writer)
        async with (
            aiohttp.ClientSession() as client,
            asyncio.timeout(20),
            client.get(daemon_env.base + "/healthz") as resp,
        ):
            assert resp.status == 200
    finally:
        for writer in flood:
            writer.close()
        code = await _stop(proc)
        await asyncio.gather(*readers)
    assert code == 0, "".join(out[-20:])
    assert len([line for line in out if "http_connection_limit" in line]) == 1, "one rate-limited line"
    [listening] = [json.loads(line) for line in out if '"http_listening"' in line]
    assert listening["max_connections"] == (max_connections or 128)  # derived: half of 256 (the reserve is larger)
    warned = [line for line in out if "http_max_connections_above_fd_limit" in line]
    assert len(warned) == (1 if max_connections else 0)
    assert not [line for line in out if "out of system resource" in line or "Too many open files" in line]


def test_systemd_unit_raises_the_open_file_limit() -> None:
    """systemd's default soft limit (1024) is below what a connection flood reaches; the unit sets its own."""
    unit = (REPO / "systemd" / "agenthub.service").read_text(encoding="utf-8")
    [value] = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("LimitNOFILE=")]
    assert int(value.split(":")[0]) >= 16_384
