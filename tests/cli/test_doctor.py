"""`agenthub doctor`: one line per check naming what it tried, never a secret; exit 0 unless something fails."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from agenthub.cli import main
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, http_error
from tests.support.fakes.feishu import FakeFeishu
from tests.support.fakes.wecom import FakeQyApi, make_aes_key
from tests.support.paths import MCP_SERVER_SCRIPT
from tests.support.postgres import migrated

SECRET = "sk-doctor-secret-0123456789"


def run_doctor(capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["doctor"])
    return code, [line for line in capsys.readouterr().out.splitlines() if line.strip()]


async def doctor(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[int, str]:
    for name, value in {"AGENTHUB_HTTP__PORT": "0", **env}.items():
        monkeypatch.setenv(name, value)
    code, lines = await asyncio.to_thread(run_doctor, capsys)
    text = "\n".join(lines)
    assert SECRET not in text
    return code, text


def line_of(text: str, name: str) -> str:
    found = [line for line in text.splitlines() if line.split()[1:2] == [name] or line[6:].startswith(name + " ")]
    assert found, f"no {name} line in:\n{text}"
    return found[0]


def write_config(text: str) -> None:
    Path("agenthub.toml").write_text(text)


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_without_a_key_the_model_is_a_warning_and_the_exit_is_0(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, text = await doctor(capsys, monkeypatch)
    assert code == 0, text
    assert line_of(text, "model").startswith("warn  model") and "api.anthropic.com:443" in text
    for name in ("config", "data", "http", "store"):
        assert line_of(text, name).startswith("ok "), text


async def test_a_dead_endpoint_fails_naming_host_port_and_cause(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = dead_port()
    code, text = await doctor(
        capsys, monkeypatch, AGENTHUB_LLM__API_KEY=SECRET, AGENTHUB_LLM__BASE_URL=f"http://127.0.0.1:{port}"
    )
    assert code == 1, text
    model = line_of(text, "model")
    assert model.startswith("fail  model") and f"127.0.0.1:{port}" in model and "refused" in model


async def test_a_key_the_endpoint_refuses_fails_with_what_to_do(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(http_error(401, "invalid x-api-key", error_type="authentication_error"))
    code, text = await doctor(
        capsys, monkeypatch, AGENTHUB_LLM__API_KEY=SECRET, AGENTHUB_LLM__BASE_URL=fake_llm.base_url
    )
    assert code == 1, text
    model = line_of(text, "model")
    assert model.startswith("fail  model") and "401" in model and "key was refused" in model
    assert len(fake_llm.message_requests()) == 1


async def test_a_working_endpoint_is_ok_after_one_call_of_one_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake_llm: FakeAnthropic
) -> None:
    code, text = await doctor(
        capsys, monkeypatch, AGENTHUB_LLM__API_KEY=SECRET, AGENTHUB_LLM__BASE_URL=fake_llm.base_url,
        AGENTHUB_LLM__MODEL="claude-test",
    )  # fmt: skip
    assert code == 0, text
    host = fake_llm.base_url.split("//")[1]
    assert line_of(text, "model") == f"ok    model          {host} answered: key accepted, model 'claude-test' known"
    [call] = fake_llm.message_requests()
    assert call.body is not None and call.body["max_tokens"] == 1


async def test_an_unknown_model_fails_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(http_error(404, "model: nope", error_type="not_found_error"))
    code, text = await doctor(
        capsys, monkeypatch, AGENTHUB_LLM__API_KEY=SECRET, AGENTHUB_LLM__BASE_URL=fake_llm.base_url,
        AGENTHUB_LLM__MODEL="nope",
    )  # fmt: skip
    assert code == 1 and "model 'nope' is unknown" in line_of(text, "model"), text


async def test_a_busy_port_fails(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, text = await doctor(capsys, monkeypatch, AGENTHUB_HTTP__PORT=str(port))
    assert code == 1
    assert line_of(text, "http") == (
        f"fail  http port      127.0.0.1:{port}: already in use → stop what uses it, or set http.port in "
        "agenthub.toml / AGENTHUB_HTTP__PORT"
    )


async def test_a_config_typo_fails_with_the_nearest_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config("[http]\nprot = 9000\n")
    code, text = await doctor(capsys, monkeypatch)
    assert code == 1 and 'did you mean "http.port"' in line_of(text, "config")


@pytest.mark.parametrize(
    ("host", "reason"),
    [("192.0.2.1", "not an address of this machine"), ("no-such-host.invalid", "the host name does not resolve")],
)
async def test_a_host_that_cannot_be_listened_on_fails_naming_the_host_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, host: str, reason: str
) -> None:
    code, text = await doctor(capsys, monkeypatch, AGENTHUB_HTTP__HOST=host)
    assert code == 1
    assert line_of(text, "http") == (
        f"fail  http port      {host}:0: {reason} → set http.host in agenthub.toml / AGENTHUB_HTTP__HOST to an "
        "address of this machine (127.0.0.1, or 0.0.0.0 for all)"
    )


@pytest.mark.parametrize(("table", "key"), [("port = 9000", "port"), ('locale = "fr"', "locale")])
async def test_a_channels_http_table_serve_would_refuse_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, table: str, key: str
) -> None:
    write_config(f"[channels.http]\n{table}\n")
    code, text = await doctor(capsys, monkeypatch)
    assert code == 1, text
    assert line_of(text, "channels.http").startswith("fail  channels.http  invalid configuration: channels.http.")
    assert f"channels.http.{key}: " in line_of(text, "channels.http")


async def test_channel_credentials_are_tried_on_the_platforms(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wecom = await FakeQyApi("corp1", "right-secret").start()
    try:
        async with FakeFeishu({"cli_app": "feishu-secret"}) as feishu:
            app = {"corp_id": "corp1", "agent_id": 1, "token": "t", "encoding_aes_key": make_aes_key(),
                   "api_base": wecom.url}  # fmt: skip
            toml = (
                '[channels.wecom.apps.good]\nsecret = "right-secret"\n'
                + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in app.items())
                + f'[channels.wecom.apps.bad]\nsecret = "{SECRET}"\n'
                + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in app.items())
                + f'[channels.feishu.apps.main]\napp_id = "cli_app"\napp_secret = "feishu-secret"\n'
                f'domain = "{feishu.url}"\n'
            )
            write_config(toml)
            code, text = await doctor(capsys, monkeypatch)
    finally:
        await wecom.close()
    where = wecom.url.split("//")[1]
    assert code == 1, text
    assert line_of(text, "wecom good") == f"ok    wecom good     {where} gettoken: secret accepted"
    assert line_of(text, "wecom bad").startswith(f"fail  wecom bad      {where} gettoken refused:")
    assert line_of(text, "feishu main").startswith("ok    feishu main    ")


async def test_a_platform_that_cannot_be_reached_is_unreachable_not_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = dead_port()
    write_config(
        f'[channels.wecom.apps.w]\ncorp_id = "c"\nagent_id = 1\nsecret = "{SECRET}"\ntoken = "t"\n'
        f'encoding_aes_key = "{make_aes_key()}"\napi_base = "http://127.0.0.1:{port}"\n'
        f'[channels.feishu.apps.f]\napp_id = "cli_x"\napp_secret = "{SECRET}"\ndomain = "http://127.0.0.1:{port}"\n'
    )
    code, text = await doctor(capsys, monkeypatch)
    assert code == 1, text
    for name, hint in (("wecom w", "api_base"), ("feishu f", "domain")):
        line = line_of(text, name)
        assert line.startswith(f"fail  {name:<14} 127.0.0.1:{port} unreachable:") and line.endswith(hint), line


async def test_postgres_is_checked_for_reach_and_schema_version(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, postgres_dsn: str
) -> None:
    store = {"AGENTHUB_STORE__BACKEND": "postgres", "AGENTHUB_STORE__DSN": postgres_dsn}
    code, text = await doctor(capsys, monkeypatch, **store)
    assert code == 0 and line_of(text, "postgres").startswith("warn  postgres"), text  # empty: migrated at start
    migrated(postgres_dsn)
    code, text = await doctor(capsys, monkeypatch, **store)
    assert code == 0 and "is current" in line_of(text, "postgres"), text
    assert postgres_dsn.split("@")[0] not in text  # the user part of the DSN is never shown
    dead = f"postgresql://agenthub@127.0.0.1:{dead_port()}/x"
    code, text = await doctor(capsys, monkeypatch, AGENTHUB_STORE__BACKEND="postgres", AGENTHUB_STORE__DSN=dead)
    assert code == 1 and line_of(text, "postgres").startswith("fail  postgres"), text


async def test_each_mcp_server_is_started_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    agents = tmp_path / "agents"
    servers = {"good": {"command": sys.executable, "args": [str(MCP_SERVER_SCRIPT)]},
               "broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}}  # fmt: skip
    write_agent(agents, "default", {"mcp": servers})
    code, text = await doctor(capsys, monkeypatch, AGENTHUB_AGENTS_DIR=str(agents))
    assert code == 1, text
    mcp = [line for line in text.splitlines() if line.startswith(("ok    mcp", "fail  mcp"))]
    assert any(line.startswith("ok    mcp            default/good") and "tool(s)" in line for line in mcp), mcp
    assert any(line.startswith("fail  mcp            default/broken") for line in mcp), mcp


async def test_a_broken_agent_definition_fails_naming_the_agent_and_the_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    agents = tmp_path / "agents"
    write_agent(agents, "default")
    write_agent(agents, "reviewer", {"modle": "x"})
    for name, value in {"AGENTHUB_HTTP__PORT": "0", "AGENTHUB_AGENTS_DIR": str(agents)}.items():
        monkeypatch.setenv(name, value)
    code = await asyncio.to_thread(main, ["doctor"])
    text, err = capsys.readouterr()
    assert code == 1, text
    assert [line for line in text.splitlines() if line[6:].startswith("agents ")] == [
        f"ok    agents         default from {agents}",
        "fail  agents         reviewer: invalid agent.json: modle: unknown key → fix "
        f"{agents / 'reviewer' / 'agent.json'}; the other agents start without it",
    ]
    assert "agent_broken" not in err  # said once, as the check, not again as a log line


async def test_the_agents_that_load_are_one_ok_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    agents = tmp_path / "agents"
    for name in ("default", "reviewer"):
        write_agent(agents, name)
    code, text = await doctor(capsys, monkeypatch, AGENTHUB_AGENTS_DIR=str(agents))
    assert code == 0, text
    assert line_of(text, "agents") == f"ok    agents         default, reviewer from {agents}"
