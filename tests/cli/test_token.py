"""`agenthub token create|list|revoke` through the real argument parser, on an auth dir under tmp."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from agenthub.cli import main
from agenthub.session_keys import session_key
from agenthub.storage.files import FileSessionStore
from agenthub.storage.tokens import TokenStore, hash_token
from tests.support.cli import cli_env


@pytest.fixture
def auth_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTHUB_AUTH_DIR", str(tmp_path / "auth"))
    monkeypatch.setenv("AGENTHUB_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "auth"


@pytest.fixture
def local_zone() -> Iterator[None]:
    """The process's local time zone is China Standard Time (UTC+8, no DST) for the test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "CST-8"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_revoke_prints_the_name_and_removes_only_that_token(auth_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "create", "--name", "ci"]) == 0
    ci = capsys.readouterr().out.strip()
    keep = TokenStore(auth_dir).create("keep")
    assert main(["token", "revoke", "ci"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("revoked ci\n", "")
    store = TokenStore(auth_dir)
    assert not store.verify(ci)
    assert store.identify(keep) == "keep"
    assert [t.name for t in store.stored()] == ["keep"]


def test_revoking_an_unknown_name_exits_2_with_one_line_and_changes_nothing(
    auth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = TokenStore(auth_dir).create("ci")
    before = (auth_dir / "tokens.json").read_bytes()
    assert main(["token", "revoke", "cj"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("agenthub: no token named 'cj' (see: ") and err.endswith(" token list)\n")
    assert len(err.splitlines()) == 1
    assert (auth_dir / "tokens.json").read_bytes() == before
    assert TokenStore(auth_dir).verify(token)


def test_list_shows_local_date_and_time_tab_separated(
    auth_dir: Path, local_zone: None, capsys: pytest.CaptureFixture[str]
) -> None:
    auth_dir.mkdir()
    entries = [
        {"name": "ci", "sha256": "0" * 64, "created_at": 1796006065},  # 2026-11-30 02:34:25 UTC
        {"name": "console", "sha256": "1" * 64, "created_at": 1700000000},  # 2023-11-14 22:13:20 UTC
        {"name": "old", "sha256": "2" * 64},  # written before created_at was recorded
    ]
    (auth_dir / "tokens.json").write_text(json.dumps({"tokens": entries}), encoding="utf-8")
    assert main(["token", "list"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines() == [
        "ci\tcreated 2026-11-30 10:34",
        "console\tcreated 2023-11-15 06:13",
        "old\tcreated unknown",
    ]


def test_a_new_token_is_listed_at_the_current_minute(
    auth_dir: Path, local_zone: None, capsys: pytest.CaptureFixture[str]
) -> None:
    before = time.time()
    assert main(["token", "create", "--name", "me"]) == 0
    after = time.time()
    capsys.readouterr()
    assert main(["token", "list"]) == 0
    name, created = capsys.readouterr().out.rstrip("\n").split("\t")
    assert name == "me"
    minutes = {time.strftime("created %Y-%m-%d %H:%M", time.localtime(t)) for t in (before, after)}
    assert created in minutes


def test_on_postgres_tokens_live_in_the_database_every_instance_reads(
    auth_dir: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTHUB_STORE__BACKEND", "postgres")
    monkeypatch.setenv("AGENTHUB_STORE__DSN", postgres_dsn)
    assert main(["token", "create", "--name", "ci"]) == 0
    [token] = capsys.readouterr().out.splitlines()  # the schema's first migration logs nothing on stdout
    assert not (auth_dir / "tokens.json").exists()
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT name, sha256 FROM api_tokens").fetchall()
    assert rows == [("ci", hash_token(token))]
    assert main(["token", "create", "--name", "ci"]) == 2 and "already exists" in capsys.readouterr().err
    assert main(["token", "list"]) == 0 and capsys.readouterr().out.startswith("ci\tcreated ")
    assert main(["token", "revoke", "ci"]) == 0 and capsys.readouterr().out == "revoked ci\n"
    assert main(["token", "revoke", "ci"]) == 2


async def test_a_token_created_beside_a_running_daemon_is_the_only_line_on_stdout(tmp_path: Path) -> None:
    """`TOKEN=$(agenthub token create --name ci)` while a daemon writes the same data: stdout is the token alone,
    and stderr has no warning about the daemon's history log (it is the daemon's to keep, as it should be)."""
    daemon = FileSessionStore(tmp_path / "data", fsync=True)  # this process owns the data's history log
    await daemon.recover()
    await daemon.append(session_key("default", "http", "c"), [{"role": "user", "content": "hi", "timestamp": 1}])
    try:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agenthub", "token", "create", "--name", "ci",
            env=cli_env(tmp_path, None), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(child.communicate(), 60)
    finally:
        await daemon.aclose()
    assert child.returncode == 0, err
    assert TokenStore(tmp_path / "auth").identify(out.decode().strip()) == "ci"
    assert out.decode().count("\n") == 1
    assert err.decode() == "Token 'ci' created. It is shown only this once; store it safely.\n"
