"""`agenthub serve` on `[store] backend = "postgres"`, as a real subprocess: a wrong DSN or an unreachable server
stops start-up with one clear line (no DSN, no password); `/readyz` reports the store, 503 while the database is
away and 200 again when it is back; `/metrics` has the store's latency."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.cli import cli_env
from tests.support.paths import REPO
from tests.support.postgres import PostgresServer, free_port

DEADLINE_S = 60.0


def _env(root: Path, dsn: str, port: int = 0) -> dict[str, str]:
    env = cli_env(root, None)
    env.update(
        AGENTHUB_STORE__BACKEND="postgres",
        AGENTHUB_STORE__DSN=dsn,
        AGENTHUB_HTTP__PORT=str(port),
        AGENTHUB_LOG_FORMAT="json",
        PYTHONPATH=str(REPO),
    )
    return env


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("postgresql://agenthub:hunter2@127.0.0.1:{closed}/agenthub", "agenthub: cannot connect to the database"),
        ("host=127.0.0.1 password=hunter2 nonsense", "agenthub: [store] dsn (AGENTHUB_STORE__DSN) is not a valid"),
    ],
)
async def test_serve_with_a_database_it_cannot_use_exits_with_one_clear_line(
    tmp_path: Path, dsn: str, says: str
) -> None:
    dsn = dsn.format(closed=free_port())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "serve",
        env=_env(tmp_path, dsn), cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
    text = (out + err).decode()
    assert proc.returncode == 1, text
    lines = [line for line in err.decode().splitlines() if not line.startswith("{")]  # the JSON log lines aside
    assert len(lines) == 1 and lines[0].startswith(says), text
    assert "hunter2" not in text and dsn not in text and "127.0.0.1" not in text


async def _get(client: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with client.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.text()
        return resp.status, body


async def _until(client: aiohttp.ClientSession, url: str, status: int) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            got, body = await _get(client, url)
            if got == status:
                return body
        except aiohttp.ClientError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered {status}"
        await asyncio.sleep(0.2)


async def test_readyz_follows_the_database_away_and_back_and_metrics_show_store_latency(
    tmp_path: Path, own_postgres_server: PostgresServer
) -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "serve",
        env=_env(tmp_path, own_postgres_server.dsn(), port), cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as client:
            ready = await _until(client, base + "/readyz", 200)
            assert ready["status"] == "ready" and ready["store"] == "postgres"
            own_postgres_server.stop()
            away = await _until(client, base + "/readyz", 503)
            assert away == {"status": "store_unavailable", "store": "postgres"}
            own_postgres_server.start()
            assert (await _until(client, base + "/readyz", 200))["store"] == "postgres"
            _, metrics = await _get(client, base + "/metrics")
            count = next(
                line for line in metrics.splitlines() if line.startswith("agenthub_store_latency_seconds_count")
            )
            assert int(count.split()[1]) >= 3  # at least the three /readyz round trips
            assert 'agenthub_store_latency_seconds_bucket{le="+Inf"}' in metrics
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == 0
