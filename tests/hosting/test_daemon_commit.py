"""Group commit across a crash, on a real `agenthub serve` (files mode, fsync on): 20 clients chat at once, the
daemon is killed (`kill -9`) in the middle of their burst, and after the restart every turn acknowledged before
the kill is in its session's history exactly once, in order; none of the others is there twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from agenthub.storage.commit_log import LOG_FILE
from tests.support.daemons import Deployment, Instance
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, last_user_text, reply_text

CLIENTS = 20
KILL_AFTER = 60
"""Acknowledged turns (all clients together) before the kill: the burst is well under way."""
DEPTH = "agenthub_inbox_depth"


def _words(body: dict[str, Any]) -> str:
    return last_user_text(body).split("\n\n[")[0]


def _echo(body: dict[str, Any]) -> ScriptedReply:
    return reply_text("answer to " + _words(body))


async def _client(d: Deployment, daemon: Instance, chat: str, acked: list[str], enough: asyncio.Event) -> None:
    client = d.client()
    n = 0
    while True:
        content = f"{chat}-m{n}"
        try:
            status, body = await client.chat(chat, content, daemon)
        except aiohttp.ClientError:
            return  # killed while this turn ran: not acknowledged
        assert status == 200 and body["reply"] == "answer to " + content, body
        acked.append(content)
        if len(acked) >= KILL_AFTER:
            enough.set()
        n += 1


def _user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user" and "channel" in m]


def _answers(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant" and isinstance(m["content"], str)]


async def test_every_turn_acknowledged_before_a_kill_mid_burst_is_in_the_history_once(
    tmp_path: Path, fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _echo
    async with Deployment(tmp_path, fake_llm, count=1, env={"AGENTHUB_SESSION__FSYNC": "true"}) as d:
        await d.start_all(warm=True)
        client, [daemon] = d.client(), d.instances
        acked: list[str] = []
        enough = asyncio.Event()
        chats = [f"burst{c}" for c in range(CLIENTS)]
        clients = [asyncio.create_task(_client(d, daemon, chat, acked, enough)) for chat in chats]
        await asyncio.wait_for(enough.wait(), timeout=120)
        await d.kill(daemon.index)  # mid-burst: every client has a turn in flight
        await asyncio.gather(*clients)
        assert (daemon.root / "data" / LOG_FILE).exists()  # the appends went through the commit log

        await d.restart(daemon.index, warm=False)
        await client.wait_metric(daemon, DEPTH, 0)  # the accepted, unanswered ones are answered now
        for chat in chats:
            messages = await client.messages(chat, daemon)
            texts = _user_texts(messages)
            mine = [c for c in acked if c.startswith(chat + "-")]
            assert texts[: len(mine)] == mine  # every acknowledged turn, in order, once
            assert len(texts) == len(set(texts))  # nothing twice, acknowledged or not
            for content in mine:
                assert _answers(messages).count("answer to " + content) == 1
