"""A real PostgreSQL for the suite: `initdb` in a temp dir as an unprivileged user, a server on a free port, and a
fresh database per test. Missing binaries fail loudly (install them with `.ci/run` / apt), never skip."""

from __future__ import annotations

import asyncio
import atexit
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agenthub.errors import StorageError
from agenthub.storage.postgres import Database, PostgresMemoryStore, PostgresSessionStore, lazy_postgres_store
from agenthub.storage.postgres.database import migrate
from tests.support.processes import KEEP

SUPERUSER = "agenthub"
UNPRIVILEGED_USERS = ("postgres", "agenthub-pgtest")
"""Who runs the server when the suite runs as root: Debian's `postgresql` package creates `postgres`; without it
we create a system user of our own."""
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
MISSING = (
    "PostgreSQL server binaries (initdb, postgres) not found: run `.ci/run` or `apt-get install -y postgresql` "
    "(looked in `pg_config --bindir` and /usr/lib/postgresql/*/bin)"
)


def find_bindir(*, path: str | None = None, pattern: str = "/usr/lib/postgresql/*/bin") -> Path:
    """Where `initdb` and `postgres` live: `pg_config --bindir` (found on `path`, default $PATH), else the newest
    `pattern` match (Debian's layout); a test failure naming `.ci/run` when there is none."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config", path=path)
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(glob.glob(pattern), key=_version_of, reverse=True)
    candidates.extend(Path(v) for v in versions)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    pytest.fail(MISSING, pytrace=False)


def _version_of(bindir: str) -> float:
    try:
        return float(Path(bindir).parent.name)
    except ValueError:
        return 0.0


def server_account() -> pwd.struct_passwd | None:
    """The account the server runs as: None when we are not root (we run it ourselves), else an unprivileged one,
    created as a system user when none exists (postgres refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    for name in UNPRIVILEGED_USERS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    name = UNPRIVILEGED_USERS[-1]
    created = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if created.returncode != 0:
        pytest.fail(f"cannot create the unprivileged user {name} for PostgreSQL: {created.stderr.strip()}")
    return pwd.getpwnam(name)


def _parent_dir() -> str | None:
    """Where the cluster's directory goes: the usual temp dir, but /tmp when we are root (the server's account
    must reach it, and a root's TMPDIR may be private)."""
    return "/tmp" if os.geteuid() == 0 else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    """One throw-away cluster: `start()`, `stop()` (and `start()` again: same data, same port), `remove()`."""

    bindir: Path
    account: pwd.struct_passwd | None
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="agenthub-pg-", dir=_parent_dir())))
    port: int = field(default_factory=free_port)
    durable: bool = False
    """fsync and synchronous commit as in production (for benchmarks); off by default, for speed in tests."""
    settings: dict[str, str] = field(default_factory=dict)
    """More `-c` settings of the server (a benchmark's `shared_preload_libraries`)."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        return self.root / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def init(self) -> None:
        if self.account is not None:
            os.chown(self.root, self.account.pw_uid, self.account.pw_gid)
        self._run_as_owner(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ]
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections; fail with its log's tail if it does not."""
        log = self.logfile.open("ab")
        self.process = subprocess.Popen(
            [str(self.bindir / "postgres"), "-D", str(self.datadir), "-p", str(self.port), *self._options()],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            user=self._uid,
            group=self._gid,
            extra_groups=self._extra_groups,
            env=self._env,
        )
        log.close()
        KEEP.add(self.process.pid)  # a session's server outlives the test that first asked for it
        self._wait_until_ready()

    def _options(self) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.root),
            "fsync": "on" if self.durable else "off",  # tests only: a lost server loses nothing we need
            "synchronous_commit": "on" if self.durable else "off",
            "full_page_writes": "on" if self.durable else "off",
            "max_connections": "300",
            "shared_buffers": "32MB",
            **self.settings,
        }
        return [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(f"postgres exited with {self.process.returncode}:\n{self._log_tail()}", pytrace=False)
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                time.sleep(0.05)
        pytest.fail(f"postgres did not accept connections within {START_TIMEOUT_S} s:\n{self._log_tail()}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT: connections are cut, clients see the server go away)."""
        if self.process is None or self.process.poll() is not None:
            self.process = None
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self) -> str:
        """A fresh, empty database; its DSN."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            # FILE_COPY (PostgreSQL ≥ 15) copies the tiny template 3× faster than the default WAL_LOG
            strategy = " STRATEGY FILE_COPY" if conn.info.server_version >= 150000 else ""
            conn.execute(f'CREATE DATABASE "{name}"{strategy}')
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        name = dsn.rsplit("/", 1)[1]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _log_tail(self) -> str:
        try:
            return self.logfile.read_text(encoding="utf-8", errors="replace")[-2000:]
        except OSError:
            return "(no server log)"

    @property
    def _uid(self) -> int | None:
        return None if self.account is None else self.account.pw_uid

    @property
    def _gid(self) -> int | None:
        return None if self.account is None else self.account.pw_gid

    @property
    def _extra_groups(self) -> list[int] | None:
        return None if self.account is None else []

    @property
    def _env(self) -> dict[str, str] | None:
        if self.account is None:
            return None
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root), "LANG": "C.UTF-8"}

    def _run_as_owner(self, argv: list[str]) -> None:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=self.root,
            check=False,
            user=self._uid,
            group=self._gid,
            extra_groups=self._extra_groups,
            env=self._env,
        )
        if done.returncode != 0:
            pytest.fail(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}", pytrace=False)


def new_server(*, durable: bool = False, settings: dict[str, str] | None = None) -> PostgresServer:
    """An initialised and started server of its own (for a test that stops it); `remove()` it afterwards."""
    server = PostgresServer(find_bindir(), server_account(), durable=durable, settings=settings or {})
    try:
        server.init()
        server.start()
    except BaseException:
        server.remove()
        raise
    return server


_shared: list[PostgresServer] = []


def shared_server() -> PostgresServer:
    """The suite's one shared server, started on first use (the `postgres_server` fixture, or code such as the
    contract suite's backend factories that cannot ask for a fixture); removed at the end of the session."""
    if not _shared:
        _shared.append(new_server())
        atexit.register(_remove_shared)
    return _shared[0]


def _remove_shared() -> None:
    while _shared:
        _shared.pop().remove()


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new empty database on the shared server; its DSN. Dropped (its connections cut) on exit."""
    server = shared_server()
    dsn = server.create_database()
    try:
        yield dsn
    finally:
        server.drop_database(dsn)


def migrated(dsn: str) -> str:
    """`dsn`, its schema brought up to date by the product's own migrations (run on a thread of its own, so this
    works inside and outside an event loop)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, migrate(dsn)).result()
    return dsn


@contextmanager
def refusing_large_writes(
    dsn: str, limit: int = 4096, tables: tuple[str, ...] = ("session_records", "session_archive", "session_meta")
) -> Iterator[None]:
    """While inside, the server refuses every row of `tables` (default: history, archive, meta) longer than
    `limit` bytes (the database's counterpart of a full disk), from inside the statement, so all-or-nothing is
    really tested."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION refuse_large_rows() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF octet_length(to_jsonb(NEW)::text) > {int(limit)} THEN RAISE EXCEPTION 'row too large'; END IF; "
            "RETURN NEW; END $$"
        )
        for table in tables:
            conn.execute(
                f"CREATE TRIGGER refuse_large BEFORE INSERT OR UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION refuse_large_rows()"
            )
    try:
        yield
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table in tables:
                conn.execute(f"DROP TRIGGER IF EXISTS refuse_large ON {table}")


def postgres_backend_parts(
    stack: ExitStack,
) -> tuple[PostgresSessionStore, Callable[[], PostgresSessionStore], Callable[[], AbstractContextManager[None]]]:
    """(store, reopen, failing_writes) on a fresh migrated database, for the SessionStore contract suite:
    `Backend("postgres", *postgres_backend_parts(stack))`. `reopen` is a new store with its own pool over the same
    database, as after a restart; the database is dropped when `stack` closes."""
    dsn = migrated(stack.enter_context(fresh_database()))
    return lazy_postgres_store(dsn), lambda: lazy_postgres_store(dsn), lambda: refusing_large_writes(dsn)


def postgres_memory_backend_parts(
    stack: ExitStack,
) -> tuple[PostgresMemoryStore, Callable[[], PostgresMemoryStore], Callable[[], AbstractContextManager[None]]]:
    """(store, reopen, failing_writes) for the MemoryStore contract suite, as `postgres_backend_parts`."""
    dsn = migrated(stack.enter_context(fresh_database()))

    def open_store() -> PostgresMemoryStore:
        return PostgresMemoryStore(Database(dsn))

    return open_store(), open_store, lambda: refusing_large_writes(dsn, tables=("memory_files",))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The suite's shared PostgreSQL, started once on first use."""
    yield shared_server()
    _remove_shared()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh empty database on the shared server for this test; dropped afterwards."""
    with fresh_database() as dsn:
        yield dsn


@pytest.fixture
def own_postgres_server() -> Iterator[PostgresServer]:
    """A server of this test's own, which it may stop and start again."""
    server = new_server()
    try:
        yield server
    finally:
        server.remove()


async def rows_holding(dsn: str, text: str, tables: Sequence[str]) -> int:
    """Rows of `tables` where `text` appears in any column (what a delete or a forget must leave at 0)."""
    found = 0
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for table in tables:
            cursor = await conn.execute(f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s", (f"%{text}%",))
            row = await cursor.fetchone()
            found += int(row[0]) if row else 0
    return found


@contextmanager
def hung(server: PostgresServer) -> Iterator[None]:
    """The server and its backends stopped (SIGSTOP) while inside: connections stay open and nothing answers."""
    postmaster = int((server.datadir / "postmaster.pid").read_text().split()[0])
    pids = [postmaster, *_children(postmaster)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


async def until_it_works(operation: Callable[[], Awaitable[Any]], deadline_s: float = 60.0) -> None:
    """Run `operation` until it stops raising StorageError (a server coming back), at most `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            await operation()
            return
        except StorageError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


@asynccontextmanager
async def session_lock_held(dsn: str, key: object) -> AsyncIterator[None]:
    """The session's advisory lock (the one its appends take: `hashtextextended(<key>, 0)`) held by another
    connection until the block ends, so the session's writes wait for it."""
    async with await psycopg.AsyncConnection.connect(dsn) as lock:
        await lock.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [str(key)])
        try:
            yield
        finally:
            await lock.rollback()


async def waiting_for_locks(dsn: str, count: int, timeout_s: float = 10.0) -> None:
    """Return once at least `count` backends of `dsn`'s database wait for a lock (a test ordering its statements)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn, asyncio.timeout(timeout_s):
        while True:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            row = await cursor.fetchone()
            if row is not None and row[0] >= count:
                return
            await asyncio.sleep(0.02)
