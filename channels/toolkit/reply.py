"""A reply handle consumed into the one text a platform that cannot stream sends: the answer below its notices."""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass

from agenthub.messages import DoneEvent, ErrorEvent, NoticeEvent, ReplyEvent
from channels.toolkit.notices import with_notices


@dataclass(frozen=True, slots=True)
class CollectedReply:
    """`text`: the answer (or the error) with its lasting notices above it; `joined`: answered with a later one."""

    text: str
    joined: bool = False


async def collect_reply(handle: AsyncIterable[ReplyEvent]) -> CollectedReply:
    """Consume `handle`: transient notices are dropped (nothing is shown before the answer), the others go
    above it; a joined answer (sent with a later message's reply) is empty, so nothing goes out twice."""
    final: DoneEvent | ErrorEvent | None = None
    notices: list[str] = []
    async for event in handle:
        if isinstance(event, NoticeEvent) and not event.transient:
            notices.append(event.text)
        elif isinstance(event, DoneEvent | ErrorEvent):
            final = event
    if isinstance(final, DoneEvent) and final.joined:
        return CollectedReply("", joined=True)
    text = final.full_text if isinstance(final, DoneEvent) else final.message if final is not None else ""
    return CollectedReply(with_notices(text, notices))
