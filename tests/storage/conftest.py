"""The backends under the contract suites: add one by adding its factory to STORE_FACTORIES (session histories)
or MEMORY_STORE_FACTORIES (memory files)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import pytest_asyncio

from agenthub.storage.files import FileSessionStore
from agenthub.storage.in_ram import InMemorySessionStore
from agenthub.storage.jobs import FileJobDocuments
from agenthub.storage.memory_files import FileMemoryStore, InMemoryMemoryStore
from agenthub.storage.postgres import Database, PostgresJobs, PostgresSessionStore, postgres_store_factory
from agenthub.storage.postgres.database import open_database
from tests.support.disks import fill, small_tmpfs
from tests.support.postgres import fresh_database, migrated, postgres_backend_parts, postgres_memory_backend_parts
from tests.support.stores import Backend, JobBackend, MemoryBackend


@contextmanager
def full_disk(disk: Path) -> Iterator[None]:
    """The small disk `disk` full while inside: every write to it fails with ENOSPC."""
    filler = fill(disk)
    try:
        yield
    finally:
        filler.unlink()


@contextmanager
def failing_writes(store: InMemorySessionStore | InMemoryMemoryStore) -> Iterator[None]:
    """The in-RAM store refuses every write while inside."""
    store.fail_writes = True
    try:
        yield
    finally:
        store.fail_writes = False


def _files(tmp_path: Path, stack: ExitStack) -> Backend:
    disk = stack.enter_context(small_tmpfs(tmp_path / "data", size="1m"))
    store = FileSessionStore(disk, fsync=True)
    return Backend("files", store, lambda: FileSessionStore(disk, fsync=True), lambda: full_disk(disk))


def _memory(tmp_path: Path, stack: ExitStack) -> Backend:
    store = InMemorySessionStore()
    return Backend("memory", store, lambda: store, lambda: failing_writes(store))


def _postgres(tmp_path: Path, stack: ExitStack) -> Backend:
    return Backend("postgres", *postgres_backend_parts(stack))


STORE_FACTORIES: dict[str, Callable[[Path, ExitStack], Backend]] = {
    "files": _files,
    "memory": _memory,
    "postgres": _postgres,
}
"""name → factory(tmp_path, exit stack for its resources)."""


@pytest.fixture(params=sorted(STORE_FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with ExitStack() as stack:
        yield STORE_FACTORIES[request.param](tmp_path, stack)


def _memory_files(tmp_path: Path, stack: ExitStack) -> MemoryBackend:
    disk = stack.enter_context(small_tmpfs(tmp_path / "disk", size="1m"))
    store = FileMemoryStore(disk / "data", disk / "auth")
    return MemoryBackend("files", store, lambda: FileMemoryStore(disk / "data", disk / "auth"), lambda: full_disk(disk))


def _memory_dict(tmp_path: Path, stack: ExitStack) -> MemoryBackend:
    store = InMemoryMemoryStore()
    return MemoryBackend("memory", store, lambda: store, lambda: failing_writes(store))


def _memory_postgres(tmp_path: Path, stack: ExitStack) -> MemoryBackend:
    return MemoryBackend("postgres", *postgres_memory_backend_parts(stack))


MEMORY_STORE_FACTORIES: dict[str, Callable[[Path, ExitStack], MemoryBackend]] = {
    "files": _memory_files,
    "memory": _memory_dict,
    "postgres": _memory_postgres,
}


@pytest.fixture(params=sorted(MEMORY_STORE_FACTORIES))
def memory_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryBackend]:
    with ExitStack() as stack:
        yield MEMORY_STORE_FACTORIES[request.param](tmp_path, stack)


def _jobs_files(tmp_path: Path, stack: ExitStack) -> JobBackend:
    return JobBackend("files", FileJobDocuments(tmp_path / "data"), lambda: FileJobDocuments(tmp_path / "data"))


def _jobs_postgres(tmp_path: Path, stack: ExitStack) -> JobBackend:
    dsn = migrated(stack.enter_context(fresh_database()))
    closing: list[Callable[[], Awaitable[None]]] = []

    def instance() -> PostgresJobs:
        database = Database(dsn)
        closing.append(database.close)
        return PostgresJobs(database)

    return JobBackend("postgres", instance(), instance, closing)


JOB_STORE_FACTORIES: dict[str, Callable[[Path, ExitStack], JobBackend]] = {
    "files": _jobs_files,
    "postgres": _jobs_postgres,
}


@pytest.fixture(params=sorted(JOB_STORE_FACTORIES))
async def job_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobBackend]:
    with ExitStack() as stack:
        backend = JOB_STORE_FACTORIES[request.param](tmp_path, stack)
        try:
            yield backend
        finally:  # every pool closed in the test's loop (a pool left open outlives it: its tasks die with the loop)
            for close in backend.closing:
                await close()


@pytest_asyncio.fixture
async def database(postgres_dsn: str) -> AsyncIterator[Database]:
    """A pool on the test's migrated PostgreSQL database (`postgres_dsn`), closed in the test's loop."""
    database = await open_database(postgres_dsn)
    try:
        yield database
    finally:
        await database.close()


@pytest_asyncio.fixture
async def pg_two(postgres_dsn: str) -> AsyncIterator[list[PostgresSessionStore]]:
    """Two instances' session stores on one PostgreSQL database."""
    stores = [await postgres_store_factory(postgres_dsn) for _ in range(2)]
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()
