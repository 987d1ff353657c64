"""MCP tool servers through the gateway: a real stdio server (tests/support/fakes/mcp_server.py) and the fake model."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from agenthub.agent.definition import AgentConfig
from agenthub.agent.mcp import whitelisted
from agenthub.agent.mcp_server import McpServer, ServerState
from agenthub.agent.mcp_support import RestartBackoff, exposed_name
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.hosting.daemon import Daemon
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, ReplyEvent, ToolEvent
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.paths import MCP_SERVER_SCRIPT, REPO

SERVER_SCRIPT = MCP_SERVER_SCRIPT
WAIT_S = 60.0
"""A hang guard for waits on a subprocess (python start-up is slow on a loaded machine), never a measurement."""


def stdio_server(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER_SCRIPT)], **extra}


@pytest_asyncio.fixture
async def mcp_gateway(settings: Settings) -> AsyncIterator[GatewayCore]:
    write_agent(
        settings.agents_dir,
        "default",
        {"tools": ["srv__*"], "mcp": {"srv": stdio_server()}, "mcp_start_wait_s": WAIT_S},
    )
    async with build_gateway(settings) as gw:
        yield gw


async def _turn(gw: GatewayCore, text: str, chat: str = "direct") -> list[ReplyEvent]:
    return [e async for e in await gw.submit(InboundMessage("cli", chat, "me", text))]


def _bodies(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r.body for r in fake.message_requests() if r.body is not None]


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [t["name"] for t in body.get("tools", [])]


def _results(body: dict[str, Any]) -> list[dict[str, Any]]:
    content = body["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def _server(gw: GatewayCore, name: str = "srv") -> McpServer:
    server = gw.mcp.server("default", name)
    assert server is not None
    return server


async def _wait(server: McpServer, predicate: Callable[[McpServer], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        await server.wait_until(predicate)


async def test_a_tool_call_round_trips_through_a_real_stdio_server(
    mcp_gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_tool("srv__echo", {"text": "ni hao"}), reply_text("it said it back"))
    events = await _turn(mcp_gateway, "echo something")
    assert isinstance(events[-1], DoneEvent) and events[-1].full_text == "it said it back"
    first, second = _bodies(fake_llm)
    assert {"srv__echo", "srv__pid", "srv__big"} <= set(_tool_names(first))
    assert _tool_names(first)[:2] == ["read_memory", "write_memory"]  # platform tools first, MCP tools after
    [result] = _results(second)
    assert result["content"] == "echo: ni hao" and not result.get("is_error")
    history = await mcp_gateway.history.load(mcp_gateway.resolve_key(InboundMessage("cli", "direct", "me", "x"))[1])
    assert history[2]["content"][0]["content"] == "echo: ni hao"


async def test_whitelist_offers_only_the_named_mcp_tools(settings: Settings, fake_llm: FakeAnthropic) -> None:
    servers = {"srv": stdio_server(), "other": stdio_server()}
    write_agent(
        settings.agents_dir, "default", {"tools": ["srv__echo", "get_time"], "mcp": servers, "mcp_start_wait_s": WAIT_S}
    )
    write_agent(settings.agents_dir, "plain", {"mcp": {"srv": stdio_server()}, "mcp_start_wait_s": WAIT_S})
    async with build_gateway(settings) as gw:
        await _turn(gw, "hello")
        assert gw.mcp.server("plain", "srv") is None  # no whitelist entry reaches it: never started
        assert gw.mcp.server("default", "other") is None
        [body] = _bodies(fake_llm)
        platform = ["read_memory", "write_memory", "manage_cron_jobs", "memory_search"]
        assert _tool_names(body) == [*platform, "get_time", "srv__echo"]
        fake_llm.script(reply_tool("srv__pid", {}))
        await _turn(gw, "call a tool that is not offered")
        assert _results(_bodies(fake_llm)[-1])[0]["is_error"] is True


async def test_the_tools_list_is_byte_identical_across_requests_and_restarts(
    mcp_gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_tool("srv__echo", {"text": "a"}), reply_text("one"))
    await _turn(mcp_gateway, "first")
    server = _server(mcp_gateway)
    fake_llm.script(reply_tool("srv__crash", {}), reply_text("it crashed"))
    await _turn(mcp_gateway, "crash it")
    await _wait(server, lambda s: s.starts == 2 and s.state is ServerState.RUNNING)
    await _turn(mcp_gateway, "third")
    tools = [json.dumps(body["tools"], ensure_ascii=False) for body in _bodies(fake_llm)]
    assert len(tools) == 5 and len(set(tools)) == 1


async def test_a_turn_does_not_wait_for_a_server_that_hangs_on_start_and_gets_its_tools_once_it_is_up(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    gate = tmp_path / "let-the-server-start"
    hold = (
        "import os, sys, time\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
        "os.execv(sys.executable, [sys.executable, sys.argv[2]])"
    )
    server = {"command": sys.executable, "args": ["-c", hold, str(gate), str(SERVER_SCRIPT)]}
    config = {"tools": ["srv__*"], "mcp": {"srv": server}, "mcp_call_timeout_s": WAIT_S, "mcp_start_wait_s": 0.2}
    write_agent(settings.agents_dir, "default", config)
    async with build_gateway(settings) as gw:
        fake_llm.script(reply_text("without tools"))
        first = await _turn(gw, "hello")
        assert _server(gw).state is ServerState.STARTING  # the turn went on while the server still hangs
        gate.touch()
        await _wait(_server(gw), lambda s: s.state is ServerState.RUNNING)
        fake_llm.script(reply_text("with tools"), reply_text("again"))
        await _turn(gw, "now")
        await _turn(gw, "and now")
    assert isinstance(first[-1], DoneEvent) and first[-1].full_text == "without tools"
    bodies = _bodies(fake_llm)
    assert not any(n.startswith("srv__") for n in _tool_names(bodies[0]))
    assert "srv__echo" in _tool_names(bodies[1])
    assert json.dumps(bodies[1]["tools"]) == json.dumps(bodies[2]["tools"])  # grew once, then byte-stable


async def test_a_server_killed_mid_session_is_a_tool_error_then_comes_back(
    mcp_gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    server = _server(mcp_gateway)
    fake_llm.script(reply_tool("srv__pid", {}), reply_text("got it"))
    await _turn(mcp_gateway, "your pid?")
    first_pid = int(_results(_bodies(fake_llm)[-1])[0]["content"])

    with capture_logs() as logs:
        fake_llm.script(reply_tool("srv__crash", {}), reply_text("that failed"))
        events = await _turn(mcp_gateway, "crash")
        assert isinstance(events[-1], DoneEvent)  # the turn goes on: the model hears about it
        [crashed] = _results(_bodies(fake_llm)[-1])
        assert crashed["is_error"] is True
        assert "MCP server 'srv' stopped during the call" in crashed["content"]
        await _wait(server, lambda s: s.starts == 2 and s.state is ServerState.RUNNING)
    assert any(e["event"] == "mcp_server_died" and e["server"] == "srv" for e in logs)
    assert any(e["event"] == "mcp_server_restart_scheduled" and e["server"] == "srv" for e in logs)

    fake_llm.script(reply_tool("srv__pid", {}), reply_text("back"))
    await _turn(mcp_gateway, "your pid now?")
    [answer] = _results(_bodies(fake_llm)[-1])
    second_pid = int(answer["content"])
    assert not answer.get("is_error") and second_pid != first_pid

    os.kill(second_pid, signal.SIGKILL)  # killed from outside, between calls: noticed without any call
    await _wait(server, lambda s: s.starts == 3 and s.state is ServerState.RUNNING)
    fake_llm.script(reply_tool("srv__echo", {"text": "still here"}), reply_text("fine"))
    await _turn(mcp_gateway, "echo")
    assert _results(_bodies(fake_llm)[-1])[0]["content"] == "echo: still here"


async def test_while_a_dead_server_waits_for_its_restart_its_tools_answer_with_a_clear_error(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(
        settings.agents_dir,
        "default",
        {"tools": ["srv__*"], "mcp": {"srv": stdio_server()}, "mcp_start_wait_s": WAIT_S},
    )
    gw = build_gateway(settings)
    gw.mcp.backoff = RestartBackoff(first_s=3600.0)  # the restart stays pending for the whole test
    async with gw:
        fake_llm.script(reply_tool("srv__crash", {}), reply_text("crashed"))
        await _turn(gw, "crash")
        await _wait(_server(gw), lambda s: s.state is ServerState.DOWN)
        fake_llm.script(reply_tool("srv__echo", {"text": "anyone?"}), reply_text("it is down, sorry"))
        events = await _turn(gw, "echo")
        assert isinstance(events[-1], DoneEvent) and events[-1].full_text == "it is down, sorry"
        [result] = _results(_bodies(fake_llm)[-1])
        assert result["is_error"] is True
        assert result["content"] == "MCP server 'srv' is not available right now (it is being restarted)"
        tools = {json.dumps(body["tools"]) for body in _bodies(fake_llm)}
        assert len(tools) == 1  # the cached list stays offered: the prompt prefix does not change


async def test_a_call_that_takes_too_long_ends_with_a_timeout_error(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    config = {
        "tools": ["srv__*"],
        "mcp": {"srv": stdio_server()},
        "mcp_call_timeout_s": 0.5,
        "mcp_start_wait_s": WAIT_S,
    }
    write_agent(settings.agents_dir, "default", config)
    async with build_gateway(settings) as gw:
        fake_llm.script(reply_tool("srv__sleep", {"seconds": 30}), reply_text("too slow"))
        events = await _turn(gw, "sleep")
        assert isinstance(events[-1], DoneEvent)
        [late] = _results(_bodies(fake_llm)[-1])
        assert late["is_error"] is True and "did not answer within 0.5 s" in late["content"]
        fake_llm.script(reply_tool("srv__echo", {"text": "after"}), reply_text("ok"))
        await _turn(gw, "echo")
        [echoed] = _results(_bodies(fake_llm)[-1])
        assert echoed["content"] == "echo: after" and _server(gw).starts == 1


async def test_stop_during_a_call_leaves_the_server_serving(mcp_gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_tool("srv__sleep", {"seconds": 30}))
    handle = await mcp_gateway.submit(InboundMessage("cli", "direct", "me", "sleep"))
    events: list[ReplyEvent] = []
    async with asyncio.timeout(WAIT_S):
        async for event in handle:
            events.append(event)
            if isinstance(event, ToolEvent) and event.phase == "start":
                await _turn(mcp_gateway, "/stop")
    assert isinstance(events[-1], ErrorEvent) and events[-1].code == "stopped"
    fake_llm.script(reply_tool("srv__echo", {"text": "awake"}), reply_text("ok"))
    await _turn(mcp_gateway, "echo")
    assert _results(_bodies(fake_llm)[-1])[0]["content"] == "echo: awake"
    assert _server(mcp_gateway).starts == 1


async def test_a_reloaded_agent_gets_its_servers_as_now_declared(settings: Settings, fake_llm: FakeAnthropic) -> None:
    def declare(mark: str) -> None:
        server = stdio_server(env={"AGENTHUB_TEST_MARK": mark})
        write_agent(
            settings.agents_dir, "default", {"tools": ["srv__env"], "mcp": {"srv": server}, "mcp_start_wait_s": WAIT_S}
        )

    async def ask() -> str:
        fake_llm.script(reply_tool("srv__env", {"name": "AGENTHUB_TEST_MARK"}), reply_text("ok"))
        await _turn(gw, "which mark?")
        return str(_results(_bodies(fake_llm)[-1])[0]["content"])

    declare("one")
    write_agent(
        settings.agents_dir, "helper", {"tools": ["srv__*"], "mcp": {"srv": stdio_server()}, "mcp_start_wait_s": WAIT_S}
    )
    daemon = Daemon(settings)
    async with build_gateway(settings) as gw:
        helper = gw.mcp.server("helper", "srv")
        assert helper is not None
        assert await ask() == "one"
        before = _server(gw)
        declare("two")
        daemon.reload_agents(gw)  # SIGHUP
        await _wait(before, lambda s: s.state is ServerState.CLOSED)
        assert await ask() == "two"
        after = _server(gw)
        assert after is not before

        shutil.rmtree(settings.agents_dir / "helper")
        daemon.reload_agents(gw)
        await _wait(helper, lambda s: s.state is ServerState.CLOSED)
        assert gw.mcp.server("helper", "srv") is None and _server(gw) is after


@pytest.mark.parametrize(
    "broken",
    [
        {"command": "/nonexistent/agenthub-mcp-server"},
        {"command": sys.executable, "args": ["-c", "raise SystemExit(1)"]},
    ],
    ids=["missing-command", "exits-at-once"],
)
async def test_a_server_that_fails_to_start_is_reported_by_name_and_the_agent_keeps_working(
    settings: Settings, fake_llm: FakeAnthropic, broken: dict[str, Any]
) -> None:
    servers = {"broken": broken, "srv": stdio_server()}
    write_agent(
        settings.agents_dir, "default", {"tools": ["broken__*", "srv__*"], "mcp": servers, "mcp_start_wait_s": WAIT_S}
    )
    with capture_logs() as logs:
        async with build_gateway(settings) as gw:
            fake_llm.script(reply_tool("srv__echo", {"text": "ok"}), reply_text("works"))
            events = await _turn(gw, "hello")
            assert _server(gw, "broken").state is ServerState.DOWN
    assert isinstance(events[-1], DoneEvent) and events[-1].full_text == "works"
    names = _tool_names(_bodies(fake_llm)[0])
    assert "srv__echo" in names and not any(n.startswith("broken__") for n in names)
    failed = [e for e in logs if e["event"] == "mcp_server_unavailable"]
    assert failed and {e["server"] for e in failed} == {"broken"} and failed[0]["agent"] == "default"


async def test_a_servers_stderr_becomes_log_lines_naming_it(settings: Settings, fake_llm: FakeAnthropic) -> None:
    script = "import sys; sys.stderr.write('first line\\nmissing API key for upstream\\n'); sys.exit(2)"
    servers = {"noisy": {"command": sys.executable, "args": ["-c", script]}}
    write_agent(settings.agents_dir, "default", {"tools": ["noisy__*"], "mcp": servers, "mcp_start_wait_s": WAIT_S})
    with capture_logs() as logs:
        async with build_gateway(settings) as gw:
            await _turn(gw, "hello")
    lines = [(e["server"], e["line"]) for e in logs if e["event"] == "mcp_server_stderr"]
    assert ("noisy", "first line") in lines and ("noisy", "missing API key for upstream") in lines


async def test_many_sessions_call_one_server_at_the_same_moment(
    mcp_gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    """Eight sessions' calls must all be in flight on the one session at once: the server answers none of them
    until all eight have arrived, so a client that sent them one by one would never finish."""
    count = 8

    def respond(body: dict[str, Any]) -> ScriptedReply:
        last = body["messages"][-1]["content"]
        results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return reply_text(f"done: {results[0]['content']}")
        tag = last[0]["text"].split("\n\n[")[0]
        return reply_tool("srv__rendezvous", {"tag": tag, "count": count})

    fake_llm.responder = respond
    async with asyncio.timeout(WAIT_S):
        finals = await asyncio.gather(*(_turn(mcp_gateway, f"chat{i}", chat=f"c{i}") for i in range(count)))
    texts = [events[-1].full_text for events in finals if isinstance(events[-1], DoneEvent)]
    assert texts == [f"done: chat{i} met {count}" for i in range(count)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _until_listening(port: int, process: asyncio.subprocess.Process) -> None:
    async with asyncio.timeout(WAIT_S):
        while process.returncode is None:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return
    raise AssertionError("the HTTP MCP server exited before listening")


class HttpMcpServer:
    """The test server over streamable HTTP on a fixed port, in a subprocess that a test can replace."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(SERVER_SCRIPT),
            "http",
            str(self.port),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await _until_listening(self.port, self.process)

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            async with asyncio.timeout(WAIT_S):
                await self.process.wait()


@pytest_asyncio.fixture
async def http_server() -> AsyncIterator[HttpMcpServer]:
    server = HttpMcpServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_a_streamable_http_server_is_used_by_url(
    settings: Settings, fake_llm: FakeAnthropic, http_server: HttpMcpServer
) -> None:
    write_agent(
        settings.agents_dir,
        "default",
        {"tools": ["web__echo"], "mcp": {"web": {"url": http_server.url}}, "mcp_start_wait_s": WAIT_S},
    )
    async with build_gateway(settings) as gw:
        fake_llm.script(reply_tool("web__echo", {"text": "over http"}), reply_text("done"))
        events = await _turn(gw, "echo over http")
        assert isinstance(events[-1], DoneEvent) and events[-1].full_text == "done"
        first, second = _bodies(fake_llm)
        assert _tool_names(first)[-1] == "web__echo"
        assert _results(second)[0]["content"] == "echo: over http"

        await http_server.stop()  # replaced by a new process: the old MCP session is unknown to it
        await http_server.start()
        fake_llm.script(reply_tool("web__echo", {"text": "again"}), reply_text("the server went away"))
        await _turn(gw, "echo again")
        [lost] = _results(_bodies(fake_llm)[-1])
        assert lost["is_error"] is True and "MCP server 'web'" in lost["content"]
        await _wait(_server(gw, "web"), lambda s: s.starts == 2 and s.state is ServerState.RUNNING)
        fake_llm.script(reply_tool("web__echo", {"text": "back"}), reply_text("ok"))
        await _turn(gw, "echo once more")
        assert _results(_bodies(fake_llm)[-1])[0]["content"] == "echo: back"

        await http_server.stop()  # gone: nothing listens until it starts again
        fake_llm.script(reply_tool("web__echo", {"text": "hello?"}), reply_text("nobody there"))
        await _turn(gw, "echo into the void")
        [refused] = _results(_bodies(fake_llm)[-1])
        assert refused["is_error"] is True and "MCP server 'web'" in refused["content"]
        await http_server.start()
        await _wait(_server(gw, "web"), lambda s: s.starts == 3 and s.state is ServerState.RUNNING)
        fake_llm.script(reply_tool("web__echo", {"text": "found"}), reply_text("ok"))
        await _turn(gw, "echo at last")
        assert _results(_bodies(fake_llm)[-1])[0]["content"] == "echo: found"


def test_mcp_config_is_validated() -> None:
    with pytest.raises(ValueError, match="exactly one of 'command' and 'url'"):
        AgentConfig.model_validate({"mcp": {"x": {"command": "a", "url": "http://h/mcp"}}})
    with pytest.raises(ValueError, match="exactly one"):
        AgentConfig.model_validate({"mcp": {"x": {}}})
    with pytest.raises(ValueError, match="letters, digits"):
        AgentConfig.model_validate({"mcp": {"bad name": {"command": "a"}}})
    config = AgentConfig.model_validate({"mcp": {"web-1": {"url": "https://h.example/mcp"}}})
    assert config.mcp["web-1"].url == "https://h.example/mcp" and config.mcp_call_timeout_s == 60


def test_names_and_whitelist_patterns() -> None:
    assert exposed_name("fs", "read.file/v2") == "fs__read_file_v2"
    assert whitelisted(["fs__*"], "fs__read") and not whitelisted(["fs__*"], "fsx__read")
    assert whitelisted(["fs__read"], "fs__read") and not whitelisted(["fs__read"], "fs__write")


def test_the_gateway_does_not_import_the_sdk_until_a_server_is_declared() -> None:
    code = "import sys; import agenthub.hosting.app, agenthub.hosting.daemon; print('mcp' in sys.modules)"
    root = REPO
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_restart_backoff_doubles_up_to_its_cap() -> None:
    backoff = RestartBackoff(first_s=1.0, max_s=60.0)
    assert [backoff.delay_s(n) for n in (1, 2, 3, 6, 7, 20)] == [1.0, 2.0, 4.0, 32.0, 60.0, 60.0]
