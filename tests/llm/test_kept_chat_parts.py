"""What a chat's calls keep of its messages (the SDK body's encodings and joined JSON, CacheWatch's prints) goes
at any history change but an append: a redaction done here or by another instance (a reload) leaves none of the
removed words in memory."""

from __future__ import annotations

import gc
import uuid
from pathlib import Path

import pytest

from agenthub.llm.cache_watch import CacheWatch
from agenthub.llm.sdk import request_body
from agenthub.llm.types import LLMRequest, LLMResponse
from agenthub.messages import Usage
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from tests.support.forget import texts_holding

KEY = SessionKey("default", "wecom", "team")


@pytest.mark.parametrize("op", ["replace", "reload"])
async def test_a_history_change_drops_the_chats_kept_message_parts(tmp_path: Path, op: str) -> None:
    history, watch = SessionHistory(tmp_path / "data", fsync=False), CacheWatch()
    history.observers.append(watch.history_changed)  # as the gateway wires it
    probe = uuid.uuid4().hex
    await history.append(KEY, {"role": "user", "content": f"my locker code is {probe}"})
    request = LLMRequest("m", [], list(await history.load(KEY)), [], 64, chat=str(KEY))
    request_body(request)
    watch.observe(request, LLMResponse([{"type": "text", "text": "ok"}], "end_turn", Usage(10, 2), message_id="m1"))
    del request
    gc.collect()
    assert list(texts_holding(probe))  # the history and the kept parts

    redacted = [{"role": "user", "content": "[removed]"}]
    if op == "replace":
        await history.replace(KEY, redacted, archive_removed=False)
    else:  # another instance redacted it in the shared store: this one reloads the chat
        await history.store.replace(KEY, redacted, archive=[])
        await history.reload(KEY)
    gc.collect()
    held = list(texts_holding(probe))
    assert held == [], held
    await history.aclose()
