"""Two real `agenthub serve` on one PostgreSQL that goes away at run time: chats get a clear error (no exception
text, no DSN), `/readyz` is 503; once the server is back, every instance is ready again and answers chats."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from agenthub.hosting.stop_bound import AFTER_DRAIN_S, EXIT_CUT_SHORT
from tests.support.daemons import Client, Deployment, Instance, message_text
from tests.support.fakes.anthropic import FakeAnthropic, last_user_text, reply_text
from tests.support.postgres import PostgresServer, hung

DEADLINE_S = 60.0


async def _until_ready(client: Client, instance: Instance, status: int) -> dict[str, Any]:
    """Poll `/readyz` (another process: nothing to await) until it answers `status`; a bound, not a measure."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got, body = await client.call("GET", "/readyz", instance)
        if got == status:
            assert isinstance(body, dict)
            return body
        assert time.monotonic() < deadline, f"instance {instance.index}: /readyz stayed {got}: {body}"
        await asyncio.sleep(0.1)


def _leaks(text: str, server: PostgresServer) -> list[str]:
    """What of the database or of an exception a reply to a client must never show."""
    words = [server.dsn(), str(server.port), "postgresql://", "psycopg", "Traceback", "Error:", "OperationalError"]
    return [word for word in words if word in text]


async def _refuses_clearly(client: Client, instance: Instance, server: PostgresServer) -> None:
    """With the database away: not ready, and a chat (JSON or SSE) is a 503 naming the store, nothing else."""
    assert await _until_ready(client, instance, 503) == {"status": "store_unavailable", "store": "postgres"}
    status, body = await client.chat(f"away-{instance.index}", message_text("away", 1), instance)
    assert (status, body["error"]["code"]) == (503, "storage_unavailable"), body
    assert _leaks(json.dumps(body), server) == []
    reply = await client.send(f"away-stream-{instance.index}", message_text("away", 2), instance).reply
    assert (reply.status, json.loads(reply.body)["error"]["code"]) == (503, "storage_unavailable"), reply
    assert _leaks(reply.body, server) == []


async def test_chats_fail_clearly_while_the_database_is_away_and_are_answered_again_once_it_is_back(
    tmp_path: Path, fake_llm: FakeAnthropic, own_postgres_server: PostgresServer
) -> None:
    fake_llm.responder = lambda body: reply_text("answer to " + last_user_text(body).split("\n\n[")[0])
    async with Deployment(tmp_path, fake_llm, count=2, dsn=own_postgres_server.dsn()) as d:
        await d.start_all(warm=False)  # the first chats below are the warm-up
        client = d.client()
        for instance in d.instances:
            status, body = await client.chat(f"before-{instance.index}", message_text("before", 1), instance)
            assert status == 200, body

        own_postgres_server.stop()
        await asyncio.gather(*(_refuses_clearly(client, i, own_postgres_server) for i in d.instances))

        own_postgres_server.start()
        for instance in d.instances:  # every instance back first: the loop below reads through each of them
            assert (await _until_ready(client, instance, 200))["store"] == "postgres"
        for instance in d.instances:
            chat = f"after-{instance.index}"
            status, body = await client.chat(chat, message_text(chat, 1), instance)
            assert status == 200 and body["reply"] == f"answer to {message_text(chat, 1)}", body
            for other in d.instances:  # the history is the shared store's: every instance shows it
                texts = [m["content"] for m in await client.messages(chat, other)]
                assert texts == [message_text(chat, 1), f"answer to {message_text(chat, 1)}"]


DRAIN_S = 5.0
SLACK_S = 8.0
"""A loaded machine's delay in delivering the signal and reaping the process: a bound, not a measure."""


async def test_an_instance_stops_within_its_bound_after_sigterm_while_the_database_is_away(
    tmp_path: Path, fake_llm: FakeAnthropic, own_postgres_server: PostgresServer
) -> None:
    """The database hangs (a network cut: connections open, nothing answers) just before SIGTERM: the clean-up's
    calls to it would wait for timeouts one after another; the process ends within its bound anyway, and says that
    its stop was cut short."""
    fake_llm.responder = lambda body: reply_text("answer to " + last_user_text(body).split("\n\n[")[0])
    env = {"AGENTHUB_HTTP__DRAIN_TIMEOUT_S": str(DRAIN_S)}
    async with Deployment(tmp_path, fake_llm, count=1, dsn=own_postgres_server.dsn(), env=env) as d:
        await d.start_all(warm=False)
        client = d.client()
        (instance,) = d.instances
        for n in range(3):  # sessions held, kept idle: their releases at the stop find no database
            status, body = await client.chat(f"held-{n}", message_text("held", n), instance)
            assert status == 200, body
        with hung(own_postgres_server):  # every connection stays open, nothing answers: a network cut
            began = time.monotonic()
            assert await instance.stop() == EXIT_CUT_SHORT  # a failure systemd shows, not a clean stop's 0
            took = time.monotonic() - began
        assert took < DRAIN_S + AFTER_DRAIN_S + SLACK_S, f"the stop took {took:.1f} s"
