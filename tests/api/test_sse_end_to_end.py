"""The server's SSE and `RemoteGateway`'s decoding are one codec: a turn relayed over the API yields the events the
gateway yields in process."""

from __future__ import annotations

from dataclasses import replace

from agenthub.config import Settings
from agenthub.gateway.handle import ReplyHandle
from agenthub.hosting.remote import RemoteGateway
from agenthub.messages import DoneEvent, InboundMessage, ReplyEvent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.harness import running_api

USAGE = {"input_tokens": 70, "output_tokens": 9, "cache_read_input_tokens": 40, "cache_creation_input_tokens": 3}
"""Fixed, so both turns report the same usage (the second one's prompt holds the first one's memory)."""


def _turn_script() -> list[ScriptedReply]:
    return [
        reply_tool("write_memory", {"content": "- 喜欢绿茶"}, text="记下了 📝", usage=USAGE),
        reply_text("Saved: 你喜欢绿茶 ✅\nline two", chunks=5, usage=USAGE),
    ]


async def _events(handle: ReplyHandle) -> list[ReplyEvent]:
    events = [event async for event in handle]
    return [replace(e, session_key="") if isinstance(e, DoneEvent) else e for e in events]


async def test_a_turn_over_the_api_yields_the_events_of_the_same_turn_in_process(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    async with running_api(settings) as api:
        fake_llm.script(*_turn_script())
        local = await _events(await api.gateway.submit(InboundMessage("http", "local", "me", "remember: green tea")))
        fake_llm.script(*_turn_script())
        async with RemoteGateway(api.base_url, api.token, default_agent="default") as remote:
            relayed = await _events(await remote.submit(InboundMessage("cli", "remote", "me", "remember: green tea")))
    assert len(local) > 4 and isinstance(local[-1], DoneEvent)
    assert relayed == local
