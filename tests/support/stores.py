"""The shape of a storage backend as the contract suites drive it (the factories live in tests/storage/conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from agenthub.storage.ports import JobDocuments, MemoryStore, SessionStore


@dataclass
class Backend:
    """One backend as the contract suite drives it."""

    name: str
    store: SessionStore
    reopen: Callable[[], SessionStore]
    """A store over the same data, as after a restart (a new process for the files, the same object in memory)."""
    failing_writes: Callable[[], AbstractContextManager[None]]
    """While inside, every write of more than a page (4 KiB) fails: a full disk for the files."""


@dataclass
class MemoryBackend:
    """One memory-file backend as its contract suite drives it."""

    name: str
    store: MemoryStore
    reopen: Callable[[], MemoryStore]
    failing_writes: Callable[[], AbstractContextManager[None]]


@dataclass
class JobBackend:
    """One scheduled-job backend as its contract suite drives it."""

    name: str
    store: JobDocuments
    other_instance: Callable[[], JobDocuments]
    """The same jobs as another instance sees them: its own pool (postgres); the files: a restart's new store."""
    closing: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """What the fixture closes after the test (every pool the backend opened: none left to a closed loop)."""
