"""Exactly once across a crash: a message that comes in again with an `inbox_id` the history already holds is
answered from the history (no model call) or, stored but unanswered, run without storing it twice."""

from __future__ import annotations

import asyncio
import itertools

from agenthub.channel.inbox_flow import HTTP_SOURCE, InboxSubmitter
from agenthub.gateway.core import GatewayCore
from agenthub.gateway.inbox_replay import INBOX_JUST_ACCEPTED
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.session_keys import SessionKey
from agenthub.storage.inbox import InMemoryInbox, message_from_json, message_to_json
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, last_user_text, reply_text

KEY = SessionKey("default", "cli", "c1")


def _msg(text: str, inbox_id: str | None = None) -> InboundMessage:
    metadata = {"inbox_id": inbox_id} if inbox_id is not None else {}
    return InboundMessage("cli", "c1", "me", text, metadata=metadata)


def _echo(body: dict[str, object]) -> ScriptedReply:
    return reply_text("answer to " + last_user_text(body).split("\n\n[")[0])


async def _user_records(gateway: GatewayCore) -> list[tuple[object, object]]:
    return [(m["content"], m.get("inbox_id")) for m in await gateway.history.load(KEY) if m.get("channel")]


async def test_an_answered_message_that_comes_again_gets_its_stored_answer_without_a_model_call(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _echo
    first = await (await gateway.submit(_msg("hello", "e1"))).result()
    assert isinstance(first, DoneEvent) and first.full_text == "answer to hello"

    again = await (await gateway.submit(_msg("hello", "e1"))).result()

    assert isinstance(again, DoneEvent) and again.full_text == "answer to hello"
    assert len(fake_llm.message_requests()) == 1
    assert await _user_records(gateway) == [("hello", "e1")]
    assert [m["role"] for m in await gateway.history.load(KEY)] == ["user", "assistant"]


async def test_a_stored_but_unanswered_message_runs_once_without_a_second_user_record(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _echo
    stored = {"role": "user", "content": "cut off", "timestamp": 1, "channel": "cli", "inbox_id": "e2"}
    await gateway.history.append(KEY, stored)  # the process died after this append, before the answer

    final = await (await gateway.submit(_msg("cut off", "e2"))).result()

    assert isinstance(final, DoneEvent) and final.full_text == "answer to cut off"
    assert len(fake_llm.message_requests()) == 1
    assert await _user_records(gateway) == [("cut off", "e2")]
    assert [m["role"] for m in await gateway.history.load(KEY)] == ["user", "assistant"]


async def test_resumed_messages_joined_behind_a_turn_each_run_at_most_once(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    """e1 was answered, e2 stored unanswered, e3 never stored: queued together behind a held turn, e1 ends with
    its stored answer, e2 and e3 go to the model as one turn and nothing is stored twice."""
    await gateway.history.append(
        KEY,
        {"role": "user", "content": "one", "timestamp": 1, "channel": "cli", "inbox_id": "e1"},
        {"role": "assistant", "content": "answer to one"},
        {"role": "user", "content": "two", "timestamp": 2, "channel": "cli", "inbox_id": "e2"},
    )
    release = asyncio.Event()
    fake_llm.script(reply_text("held", hold=release), reply_text("answer to two and three"))
    running = await gateway.submit(_msg("new"))
    await fake_llm.wait_for_requests(1)
    resumed = [("one", "e1"), ("two", "e2"), ("three", "e3")]
    handles = [await gateway.submit(_msg(text, entry)) for text, entry in resumed]
    release.set()

    finals = [await h.result() for h in (running, *handles)]

    texts = [f.full_text if isinstance(f, DoneEvent) else f"error: {f.message}" for f in finals]
    assert texts[1] == "answer to one"
    assert texts[3] == "answer to two and three"
    assert not texts[0].startswith("error") and not texts[2].startswith("error")
    assert len(fake_llm.message_requests()) == 2
    assert await _user_records(gateway) == [("one", "e1"), ("two", "e2"), ("new", None), ("three", "e3")]


async def test_members_of_a_joined_turn_resumed_one_by_one_get_the_answer_once(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    """Two messages answered together before a crash, both unsettled: resumed one after the other, the earlier one
    ends as it did then (answered together, `joined`), only the later one carries the answer."""
    records = [
        {"role": "user", "content": "one", "timestamp": 1, "channel": "cli", "inbox_id": "e1"},
        {"role": "user", "content": "two", "timestamp": 2, "channel": "cli", "inbox_id": "e2", "together": True},
        {"role": "assistant", "content": "answer to both", "timestamp": 3},
    ]
    await gateway.history.append(KEY, *records)

    earlier = await (await gateway.submit(_msg("one", "e1"))).result()
    later = await (await gateway.submit(_msg("two", "e2"))).result()

    assert isinstance(earlier, DoneEvent) and earlier.joined and earlier.answer == "answer to both"
    assert isinstance(later, DoneEvent) and later.full_text == "answer to both" and not later.joined
    assert fake_llm.message_requests() == []


def _together_after_an_answer(history: list[dict[str, object]]) -> list[object]:
    """User messages flagged `together` whose record directly follows an assistant record (answered apart)."""
    return [
        b.get("content")
        for a, b in itertools.pairwise(history)
        if a.get("role") == "assistant" and b.get("role") == "user" and b.get("together")
    ]


async def test_a_message_joined_behind_an_answered_one_is_not_flagged_together_with_it(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    """e1 was answered before a crash; resumed, it waits with a new e2 behind a running turn: e2 goes to the model
    after e1's answer, so its record must not say it was sent together with e1 (a replay would join them)."""
    await gateway.history.append(
        KEY,
        {"role": "user", "content": "one", "timestamp": 1, "channel": "cli", "inbox_id": "e1"},
        {"role": "assistant", "content": "answer to one"},
    )
    release = asyncio.Event()
    fake_llm.script(reply_text("held", hold=release), reply_text("answer to two"))
    running = await gateway.submit(_msg("new"))
    await fake_llm.wait_for_requests(1)
    handles = [await gateway.submit(_msg(text, entry)) for text, entry in (("one", "e1"), ("two", "e2"))]
    release.set()
    finals = [await h.result() for h in (running, *handles)]
    assert [f.full_text for f in finals if isinstance(f, DoneEvent)] == ["held", "answer to one", "answer to two"]

    history = await gateway.history.load(KEY)
    assert _together_after_an_answer(history) == []
    replayed = [await (await gateway.submit(_msg(t, e))).result() for t, e in (("one", "e1"), ("two", "e2"))]
    assert [f.full_text for f in replayed if isinstance(f, DoneEvent)] == ["answer to one", "answer to two"]
    assert len(fake_llm.message_requests()) == 2


async def test_a_together_flag_after_an_answer_never_joins_the_answers_on_replay(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    """A history written before the fix (e2 flagged `together` right after e1's answer): replayed, each message
    gets its own answer, not both joined."""
    await gateway.history.append(
        KEY,
        {"role": "user", "content": "one", "timestamp": 1, "channel": "cli", "inbox_id": "e1"},
        {"role": "assistant", "content": "answer to one"},
        {"role": "user", "content": "two", "timestamp": 2, "channel": "cli", "inbox_id": "e2", "together": True},
        {"role": "assistant", "content": "answer to two"},
    )
    one = await (await gateway.submit(_msg("one", "e1"))).result()
    two = await (await gateway.submit(_msg("two", "e2"))).result()
    assert isinstance(one, DoneEvent) and one.full_text == "answer to one" and not one.joined
    assert isinstance(two, DoneEvent) and two.full_text == "answer to two" and not two.joined
    assert fake_llm.message_requests() == []


async def test_a_resumed_entry_is_looked_up_even_when_its_stored_message_says_it_was_just_accepted(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _echo
    inbox = InMemoryInbox()
    forged = InboundMessage("cli", "c1", "me", "cut off", metadata={INBOX_JUST_ACCEPTED: True})
    entry = await inbox.accept(HTTP_SOURCE, message_to_json(forged))
    stored = {"role": "user", "content": "cut off", "timestamp": 1, "channel": "cli", "inbox_id": entry.id}
    await gateway.history.append(KEY, stored)  # the process died after this append, before the answer

    resumed = InboxSubmitter(inbox, gateway)  # what `resume_http` does with each unsettled entry
    final = await (await resumed.submit_entry(entry, message_from_json(entry.payload))).result()

    assert isinstance(final, DoneEvent) and final.full_text == "answer to cut off"
    assert await _user_records(gateway) == [("cut off", entry.id)]  # not stored a second time


async def test_messages_just_accepted_are_each_stored_once_in_arrival_order_and_answered(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _echo
    submitter = InboxSubmitter(InMemoryInbox(), gateway)
    handles = [await submitter.submit(HTTP_SOURCE, _msg(f"m{n}")) for n in range(3)]  # the later ones join or queue
    finals = [await handle.result() for handle in handles]

    assert all(isinstance(f, DoneEvent) for f in finals)
    records = await _user_records(gateway)
    assert [content for content, _ in records] == ["m0", "m1", "m2"]
    assert len({entry_id for _, entry_id in records if isinstance(entry_id, str)}) == 3
