"""Every storage backend's whole `Stores`, for the port contract suites: `backend_stores` is parametrized over
`BACKENDS` (the files, then PostgreSQL on a fresh database of the shared server), opened by the product's own
factory (`open_stores`); `more_stores` opens further instances over the same data (another process, a restart)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agenthub.config import Settings
from agenthub.storage.stores import BACKENDS, Stores, open_stores
from tests.support.roots import make_settings

OpenMore = Callable[[], Awaitable[Stores]]


@pytest.fixture(params=sorted(BACKENDS))
def store_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings naming one backend of `BACKENDS` (every backend the product has runs every suite using it)."""
    store: dict[str, Any] = {"backend": request.param}
    if request.param == "postgres":
        store["dsn"] = request.getfixturevalue("postgres_dsn")
    return make_settings(tmp_path, store=store)


@pytest_asyncio.fixture
async def more_stores(store_settings: Settings) -> AsyncIterator[OpenMore]:
    """Opens another `Stores` over the same data each call; all closed at the end."""
    opened: list[Stores] = []

    async def open_more() -> Stores:
        opened.append(await open_stores(store_settings))
        return opened[-1]

    try:
        yield open_more
    finally:
        for stores in reversed(opened):
            await stores.aclose()


@pytest_asyncio.fixture
async def backend_stores(more_stores: OpenMore) -> Stores:
    """One backend's stores, as a daemon opens them."""
    return await more_stores()
