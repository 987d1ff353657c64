"""The reference in "something went wrong (ref …)" is whole and unique, so an operator finds the one log line."""

from __future__ import annotations

import re

from structlog.testing import LogCapture

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import ErrorEvent, InboundMessage
from agenthub.session_keys import SessionKey

KEY = SessionKey("default", "cli", "direct")
REF = re.compile(r"\(ref ([^)]+)\)")


async def _failing_turn_ref(settings: Settings, message_id: str = "") -> str:
    """Run one turn that fails inside (its history file is a directory) in a fresh gateway; return the shown ref."""
    async with build_gateway(settings) as gateway:
        history_file = gateway.history.layout("default").history_file(KEY)
        history_file.mkdir(parents=True, exist_ok=True)
        message = InboundMessage("cli", "direct", "me", "hi", message_id=message_id)
        final = await (await gateway.submit(message)).result()
    assert isinstance(final, ErrorEvent) and final.code == "internal"
    found = REF.search(final.message)
    assert found is not None, final.message
    return found.group(1)


async def test_refs_of_local_messages_are_unique_across_restarts(settings: Settings, log_capture: LogCapture) -> None:
    first = await _failing_turn_ref(settings)
    second = await _failing_turn_ref(settings)  # a restarted daemon: a fresh gateway on the same data
    assert first != second
    logged = [e for e in log_capture.entries if e["event"] == "turn_failed"]
    assert [e["ref"] for e in logged] == [first, second]
    assert [e["message_id"] for e in logged] == [first, second]  # the ref is the whole id the turn logs under


async def test_the_ref_of_a_platform_message_is_its_whole_id(settings: Settings, log_capture: LogCapture) -> None:
    assert await _failing_turn_ref(settings, "om_dc13264520392913993dd051dba21dcf") == (
        "om_dc13264520392913993dd051dba21dcf"
    )
