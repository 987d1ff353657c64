"""/restart empties the working history but never loses what was said: the cleared messages go to the archive."""

from __future__ import annotations

from agenthub.gateway.core import GatewayCore
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.session_keys import SessionKey
from tests.support.fakes.anthropic import FakeAnthropic, reply_text

KEY = SessionKey("default", "cli", "direct")


async def _say(gw: GatewayCore, text: str) -> str:
    final = await (await gw.submit(InboundMessage("cli", "direct", "me", text))).result()
    assert isinstance(final, DoneEvent), final
    return final.full_text


async def test_restart_archives_the_cleared_history(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("noted: the key is 42"))
    await _say(gateway, "remember the key 42")
    before = await gateway.history.load(KEY)
    await _say(gateway, "/restart")
    assert "starts fresh" in await _say(gateway, "/restart")
    assert await gateway.history.load(KEY) == []
    archived = await gateway.history.archived(KEY)
    assert archived == before
    assert [m["content"] for m in archived] == ["remember the key 42", "noted: the key is 42"]
    assert not any("/restart" in str(m["content"]) for m in archived)  # commands are not conversation
