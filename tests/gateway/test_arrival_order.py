"""One instance's side of the inbox's arrival order: a resumed earlier message goes before a later one queued here,
and an earlier message no instance resumes holds a session up for at most `2 × lease_s`, once (an inbox of one
instance cannot tell whether another has it: tests/gateway/test_arrival_order_holders.py for a shared one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from structlog.testing import capture_logs

from agenthub.channel.inbox_flow import HTTP_SOURCE, InboxSubmitter
from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.session_keys import SessionKey
from agenthub.storage.inbox import InMemoryInbox, message_to_json
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.shared_gateways import tag_of

KEY = SessionKey("default", "http", "ordered")


def message(text: str) -> InboundMessage:
    return InboundMessage("http", KEY.chat_id, "me", text)


async def user_tags(history: list[dict[str, Any]]) -> list[str]:
    return [tag_of(str(r["content"])) for r in history if r["role"] == "user"]


async def test_a_resumed_earlier_message_goes_before_a_later_one_queued_behind_the_running_turn(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("first answer", hold=release))
    inbox = InMemoryInbox()
    async with build_gateway(settings, inbox=inbox) as gateway:
        submitter = InboxSubmitter(inbox, gateway, resolve=gateway.session_of)
        entries = [await inbox.accept(HTTP_SOURCE, message_to_json(message(f"m{n}")), session=str(KEY)) for n in (1, 2)]
        running = await submitter.submit_entry(entries[0], message("m1"))
        await fake_llm.wait_for_requests(1, timeout_s=60)
        later = await submitter.submit(HTTP_SOURCE, message("m3"))  # a new message, accepted after m2
        resumed = await submitter.submit_entry(entries[1], message("m2"))  # m2 comes back (a takeover, a restart)
        release.set()
        for handle in (running, later, resumed):
            assert isinstance(await handle.result(), DoneEvent)
        assert await user_tags(await gateway.history.load(KEY)) == ["m1", "m2", "m3"]
        await submitter.aclose()


async def test_an_earlier_message_nobody_answers_holds_the_session_up_for_two_lease_times_at_most_once(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(store={"lease_s": 0.3})
    inbox = InMemoryInbox()
    async with build_gateway(settings, inbox=inbox) as gateway:
        submitter = InboxSubmitter(inbox, gateway, resolve=gateway.session_of)
        await inbox.accept(HTTP_SOURCE, message_to_json(message("lost")), session=str(KEY))  # never submitted
        with capture_logs() as logs:
            final = await (await submitter.submit(HTTP_SOURCE, message("next"))).result()
        assert isinstance(final, DoneEvent)
        assert [e for e in logs if e["event"] == "arrival_order_gave_up"] != []
        assert await user_tags(await gateway.history.load(KEY)) == ["next"]

        with capture_logs() as logs:  # the entry given up on keeps nobody waiting any more
            final = await (await submitter.submit(HTTP_SOURCE, message("after"))).result()
        assert isinstance(final, DoneEvent)
        assert [e for e in logs if e["event"] == "arrival_order_gave_up"] == []
        assert await user_tags(await gateway.history.load(KEY)) == ["next", "after"]
        await submitter.aclose()
