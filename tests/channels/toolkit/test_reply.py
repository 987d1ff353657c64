"""collect_reply: a handle consumed into the one text a non-streaming platform sends."""

from __future__ import annotations

from collections.abc import AsyncIterator

from agenthub.messages import DeltaEvent, DoneEvent, ErrorEvent, NoticeEvent, ReplyEvent
from channels.toolkit.notices import with_notices
from channels.toolkit.reply import collect_reply


async def _events(*events: ReplyEvent) -> AsyncIterator[ReplyEvent]:
    for event in events:
        yield event


async def test_the_answer_carries_its_lasting_notices_and_drops_transient_ones() -> None:
    reply = await collect_reply(
        _events(
            NoticeEvent("queued behind 1", transient=True),
            DeltaEvent("an"),
            NoticeEvent("compacted"),
            DeltaEvent("swer"),
            DoneEvent("answer"),
        )
    )
    assert reply.text == with_notices("answer", ["compacted"])
    assert not reply.joined


async def test_an_error_is_the_reply_and_a_joined_answer_sends_nothing() -> None:
    failed = await collect_reply(_events(DeltaEvent("half"), ErrorEvent("the model failed")))
    assert failed.text == "the model failed"
    joined = await collect_reply(_events(DoneEvent("answered with the next one", joined=True)))
    assert joined.joined and joined.text == ""


async def test_a_handle_that_ends_without_a_final_event_gives_only_its_notices() -> None:
    reply = await collect_reply(_events(NoticeEvent("fallback model used")))
    assert reply.text == with_notices("", ["fallback model used"])
