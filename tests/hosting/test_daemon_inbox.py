"""The durable inbox across a crash, on a real `agenthub serve` (files mode, tests/support/daemons.py): every HTTP
chat request accepted before a `kill -9` is answered into its session exactly once and in order after the restart,
and one answered just before the kill (its settle never written) is not sent to the model again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agenthub.messages import InboundMessage
from agenthub.storage.inbox import INBOX_FILE, message_to_json
from tests.support.daemons import Deployment, Sent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, last_user_text, reply_text

SESSIONS = 10
PER_SESSION = 3
DEPTH = "agenthub_inbox_depth"
COLD_START_S = 60.0
"""A bound on a cold process's first model calls (they wait for the SDK's import: seconds on a loaded machine)."""


def _words(body: dict[str, Any]) -> str:
    return last_user_text(body).split("\n\n[")[0]


def _user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user" and "channel" in m]


async def test_thirty_requests_accepted_before_a_kill_are_answered_once_each_in_order_after_the_restart(
    tmp_path: Path, fake_llm: FakeAnthropic
) -> None:
    held = asyncio.Event()  # never set: the first run's model answers nothing

    def held_echo(body: dict[str, Any]) -> ScriptedReply:
        return reply_text("answer to " + _words(body), hold=held)

    fake_llm.responder = held_echo
    async with Deployment(tmp_path, fake_llm, count=1) as d:
        await d.start_all(warm=False)  # a warm-up turn would wait at the held model
        client, [daemon] = d.client(), d.instances
        in_flight: list[Sent] = []
        for i in range(PER_SESSION):  # message i of every session at once; the next round once all are stored
            in_flight += [client.send(f"s{s}", f"s{s}-m{i}", daemon) for s in range(SESSIONS)]
            assert all(await asyncio.gather(*(one.accepted for one in in_flight)))
            await client.wait_metric(daemon, DEPTH, SESSIONS * (i + 1))
        await fake_llm.wait_for_requests(SESSIONS, timeout_s=COLD_START_S)  # every session's first turn at the model
        await d.kill(daemon.index)
        assert all(reply.cut for reply in await asyncio.gather(*(one.reply for one in in_flight)))

        fake_llm.responder = lambda body: reply_text("answer to " + _words(body))
        await d.restart(daemon.index, warm=False)
        await client.wait_metric(daemon, DEPTH, 0)
        for s in range(SESSIONS):
            messages = await client.messages(f"s{s}", daemon)
            assert _user_texts(messages) == [f"s{s}-m{i}" for i in range(PER_SESSION)]  # 0 lost, 0 twice, in order
            assert messages[-1]["role"] == "assistant"
            assert [m["role"] for m in messages].count("assistant") == 2  # m0 alone, then m1 and m2 together


def _journal_line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


async def test_an_entry_answered_before_the_kill_but_not_settled_is_not_sent_to_the_model_again(
    tmp_path: Path, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("the only answer"))
    async with Deployment(tmp_path, fake_llm, count=1) as d:
        await d.start_all(warm=False)
        client, [daemon] = d.client(), d.instances
        status, _ = await client.chat("c1", "asked once", daemon)
        assert status == 200
        assert await client.metric(daemon, DEPTH) == 0
        await d.kill(daemon.index)
        data_dir = daemon.root / "data"
        answered = await asyncio.to_thread(_entry_id_of_the_stored_message, data_dir, "c1")
        message = InboundMessage(
            "http", "c1", "config-1", "asked once", agent="default", metadata={"chat_type": "private"}
        )
        accept = {
            "op": "accept",
            "id": answered,
            "seq": 1,
            "at": 1.0,
            "source": "http",
            "payload": message_to_json(message),
        }
        journal = data_dir / INBOX_FILE
        journal.write_text(_journal_line(accept), encoding="utf-8")  # the kill landed between answer and settle

        await d.restart(daemon.index, warm=False)
        await client.wait_metric(daemon, DEPTH, 0)
        messages = await client.messages("c1", daemon)
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "asked once"),
            ("assistant", "the only answer"),
        ]
        assert len(fake_llm.message_requests()) == 1


def _entry_id_of_the_stored_message(data_dir: Path, chat_id: str) -> str:
    """The inbox id the HTTP request's user record was stored with (the JSONL history of the session)."""
    for path in data_dir.rglob("*.jsonl"):
        if chat_id not in path.name or path.name == INBOX_FILE:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("role") == "user" and isinstance(record.get("inbox_id"), str):
                return str(record["inbox_id"])
    raise AssertionError("no user record with an inbox id")
