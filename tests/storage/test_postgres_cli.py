"""`agenthub store init`: creates and migrates the PostgreSQL schema of `[store] dsn`, through the real parser."""

from __future__ import annotations

import psycopg
import pytest

from agenthub.cli import main
from agenthub.storage.postgres import SCHEMA_VERSION
from tests.support.postgres import free_port


def tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {row[0] for row in rows}


def test_store_init_creates_the_schema_once(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTHUB_STORE__BACKEND", "postgres")
    monkeypatch.setenv("AGENTHUB_STORE__DSN", postgres_dsn)
    assert main(["store", "init"]) == 0
    assert f"version {SCHEMA_VERSION}" in capsys.readouterr().out
    assert {"schema_version", "session_heads", "session_records", "session_archive", "session_meta"} <= tables(
        postgres_dsn
    )
    assert main(["store", "init"]) == 0
    assert "already at version" in capsys.readouterr().out


def test_store_init_on_the_files_backend_says_there_is_nothing_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "init"]) == 2
    err = capsys.readouterr().err
    assert 'backend = "postgres"' in err and "AGENTHUB_STORE__DSN" in err


def test_store_init_against_an_unreachable_database_is_one_line_without_the_dsn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTHUB_STORE__BACKEND", "postgres")
    monkeypatch.setenv("AGENTHUB_STORE__DSN", f"postgresql://agenthub:hunter2@127.0.0.1:{free_port()}/agenthub")
    assert main(["store", "init"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot connect" in err and "hunter2" not in err and "127.0.0.1" not in err
