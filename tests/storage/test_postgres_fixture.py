"""The suite's PostgreSQL fixture: it finds Debian's server binaries, and fails (never skips) without them."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.support.postgres import PostgresServer, find_bindir


def test_missing_server_binaries_fail_the_test_naming_the_fix(tmp_path: Path) -> None:
    (tmp_path / "16" / "bin").mkdir(parents=True)  # a directory without initdb/postgres does not count
    with pytest.raises(pytest.fail.Exception, match=r"\.ci/run.*apt-get install -y postgresql"):
        find_bindir(path=str(tmp_path), pattern=str(tmp_path / "*" / "bin"))


def test_the_newest_debian_server_is_chosen(tmp_path: Path) -> None:
    for version in ("9.6", "14", "15"):
        bindir = tmp_path / version / "bin"
        bindir.mkdir(parents=True)
        (bindir / "initdb").touch()
        (bindir / "postgres").touch()
    assert find_bindir(path=str(tmp_path), pattern=str(tmp_path / "*" / "bin")) == tmp_path / "15" / "bin"


def test_each_test_gets_an_empty_database_of_its_own(postgres_server: PostgresServer, postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
        assert conn.execute("SHOW fsync").fetchone() == ("off",)  # tests only
    assert postgres_dsn != postgres_server.dsn() and postgres_dsn.startswith("postgresql://agenthub@127.0.0.1:")
