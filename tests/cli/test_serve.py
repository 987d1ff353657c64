"""`agenthub serve` refusing to start says what to change in one line, with the exit status systemd does not
restart on."""

from __future__ import annotations

import asyncio
import configparser
import socket
import sys
from pathlib import Path

import pytest

from agenthub.errors import AddressNotReadyError, ConfigError
from agenthub.web import _unavailable
from tests.support import processes
from tests.support.cli import cli_env
from tests.support.paths import REPO

CONFIG_ERROR_STATUS = 2
RESTARTED_STATUS = 1
"""A failure the unit restarts (`Restart=on-failure`): what may pass by itself, e.g. at boot."""


async def serve(root: Path, **env: str) -> tuple[int, str, str]:
    environ = {**cli_env(root, None), "PYTHONPATH": str(REPO), "HOME": str(root), **env}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "serve", env=environ, cwd=root,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:
            processes.end(proc.pid)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_busy_port_is_one_line_naming_the_port_and_the_key_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = await serve(tmp_path, AGENTHUB_HTTP__PORT=str(port))
    assert code == CONFIG_ERROR_STATUS, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"127.0.0.1:{port}" in lines[0] and "already in use" in lines[0]
    assert "http.port" in lines[0] and "AGENTHUB_HTTP__PORT" in lines[0]


def test_the_systemd_unit_does_not_restart_on_a_configuration_error() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(REPO / "systemd" / "agenthub.service")
    assert unit["Service"]["Restart"] == "on-failure"
    assert str(CONFIG_ERROR_STATUS) in unit["Service"]["RestartPreventExitStatus"].split()


async def test_a_first_start_logs_no_stale_temp_files_and_a_start_after_a_kill_names_how_many(tmp_path: Path) -> None:
    with socket.socket() as taken:  # the start stops at the port, after the temp files were looked for
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        _, first, _ = await serve(tmp_path, AGENTHUB_HTTP__PORT=port)
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data" / ".tokens.json.999999999.ab12cd34ef56.tmp").write_text("{")  # a writer killed mid-write
        _, after_kill, _ = await serve(tmp_path, AGENTHUB_HTTP__PORT=port)
    assert "agents_loaded" in first and "stale_temp_files_removed" not in first  # nothing found: nothing said
    assert '"event": "stale_temp_files_removed"' in after_kill and '"count": 1' in after_kill


async def serve_with(root: Path, *args: str) -> tuple[int, str]:
    environ = {**cli_env(root, None), "PYTHONPATH": str(REPO), "HOME": str(root)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "serve", *args, env=environ, cwd=root,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:
            processes.end(proc.pid)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--host", "no-such-host.invalid", "--port", "0"), "cannot listen on no-such-host.invalid:0: the host name"),
        (("--port", "70000"), "argument --port: must be a port number, 0 to 65535"),
    ],
)
async def test_a_listen_address_that_cannot_be_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    code, err = await serve_with(tmp_path, *args)
    assert code == CONFIG_ERROR_STATUS, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert says in lines[-1], err
    if "--host" in args:
        assert len(lines) == 1 and "http.host" in lines[0] and "AGENTHUB_HTTP__HOST" in lines[0], err


async def test_a_start_logs_that_llm_timeouts_exceed_the_lock_timeout_in_the_daemons_log(tmp_path: Path) -> None:
    """configuration.md: the daemon logs `config_llm_timeouts_exceed_lock_timeout` at start-up; the settings are read
    before the daemon's logging is set up, so the warning must still reach its log (JSON on stdout under systemd)."""
    with socket.socket() as taken:  # the start stops at the port, after the settings were read
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        timeouts = {"AGENTHUB_LLM__TIMEOUT_S": "600", "AGENTHUB_SESSION__LOCK_TIMEOUT_S": "30"}
        code, out, err = await serve(tmp_path, AGENTHUB_HTTP__PORT=str(taken.getsockname()[1]), **timeouts)
    assert code == CONFIG_ERROR_STATUS, err
    assert out.count('"event": "config_llm_timeouts_exceed_lock_timeout"') == 1, out


async def test_an_address_not_yet_on_the_machine_is_one_line_and_exit_1_which_systemd_restarts(
    tmp_path: Path,
) -> None:
    """EADDRNOTAVAIL at boot: the interface or its address (DHCP, a VIP) comes up after the unit starts; exit 2 would
    leave the daemon down for good, exit 1 is restarted until the address is there."""
    code, err = await serve_with(tmp_path, "--host", "192.0.2.1", "--port", "0")  # TEST-NET-1: never this machine's
    assert code == RESTARTED_STATUS, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "cannot listen on 192.0.2.1:0: the address is not one of this machine's" in lines[0], err
    assert "http.host" in lines[0] and "AGENTHUB_HTTP__HOST" in lines[0], err


def test_the_systemd_unit_restarts_what_may_pass_by_itself() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(REPO / "systemd" / "agenthub.service")
    assert str(RESTARTED_STATUS) not in unit["Service"]["RestartPreventExitStatus"].split()


def test_a_name_lookup_that_fails_for_now_is_no_configuration_error() -> None:
    """`EAI_AGAIN` (the resolver is not reachable yet, e.g. at boot) may pass: not exit 2, which systemd never
    restarts, but exit 1 with the one line; a name that does not exist (`EAI_NONAME`) is the configuration's fault."""
    now = _unavailable("agenthub.internal", 8080, socket.gaierror(socket.EAI_AGAIN, "Temporary failure"))
    never = _unavailable("agenthub.internal", 8080, socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    assert isinstance(now, AddressNotReadyError) and not isinstance(now, ConfigError)
    assert "agenthub.internal:8080" in str(now) and "http.host" in str(now)
    assert isinstance(never, ConfigError) and "http.host" in str(never)
