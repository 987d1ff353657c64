"""Retention: facts planted early in a chat, then five L2 compactions (the product's SessionCompactor, a fake model
writing a summary that keeps no detail) and an AutoCompact sweep; every fact must still be found, as it is in a
control copy of the chat that was never compacted."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.memory.wiring import AUTOCOMPACT_TIMER
from agenthub.session_keys import SessionKey
from recall_data import store
from recall_data.generate import conversation
from recall_data.model import Conversation
from recall_data.probe import Probe, evaluate
from recall_data.score import LIMIT, Outcome
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text
from tests.support.roots import make_settings

ROUNDS = 5
SUMMARY = {
    "zh": "## 用户意图\n- 两人闲聊近况\n## 决定\n- 无\n## 事实与标识符\n- （细节未记录）\n## 未完成任务\n- 无",
    "en": "## 用户意图\n- two friends catching up\n## 决定\n- none\n## 事实与标识符\n- (no details kept)\n"
    "## 未完成任务\n- none",
}
MEMORY = "- Two friends chat about their lives.\n"
ProbeFor = Callable[[GatewayCore], Probe]


@dataclass
class Retention:
    planted: int
    control: int  # facts found in the never-compacted copy
    kept: int  # of those, still found after the compactions
    after: int  # facts found after the compactions
    compactions: int  # compactions that archived something (ROUNDS + the sweep, per chat)
    archived: int  # turns moved to the archive
    seconds: float

    @property
    def ratio(self) -> float:
        return self.kept / self.control if self.control else 0.0


def control_key(conv: Conversation) -> SessionKey:
    return SessionKey(store.AGENT, store.CHANNEL, conv.cid + "-control")


def _responder(lang: str) -> Callable[[dict[str, Any]], ScriptedReply | None]:
    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        system = " ".join(str(b.get("text", "")) for b in body.get("system") or [] if isinstance(b, dict))
        if "conversation summariser" in system:
            return reply_text(SUMMARY[lang])
        return reply_text(MEMORY) if "You maintain" in system else None

    return respond


async def _compact_in_rounds(gw: GatewayCore, conv: Conversation) -> tuple[int, int]:
    """Write the chat in ROUNDS + 1 parts, compacting after each of the first ROUNDS; then idle it and sweep.
    Returns (compactions that archived something, turns archived)."""
    key, agent = store.key_of(conv), gw.agents.get(store.AGENT)
    assert gw.turn_services.compactor is not None
    n = len(conv.turns)
    bounds = [int(n * share) for share in (0.3, 0.4, 0.5, 0.6, 0.7)] + [n]
    done, start, archived = 0, 0, 0
    for end in bounds[:ROUNDS]:
        await store.write(gw.history, key, conv.turns[start:end])
        start = end
        await gw.turn_services.compactor.compact(key, agent, reason="manual", actor="bench-recall")
        now = len(await gw.history.archived(key))
        done, archived = done + (now > archived), now
    await store.write(gw.history, key, conv.turns[start:])
    then = time.time() - 2 * gw.settings.memory.autocompact_idle_s
    os.utime(gw.history.layout(store.AGENT).history_file(key), (then, then))
    await gw.timers[AUTOCOMPACT_TIMER].tick_now()
    now = len(await gw.history.archived(key))
    return done + (now > archived), now


def _found(outcomes: Sequence[Outcome]) -> set[str]:
    """Questions whose answer is among the hits in either form."""
    return {o.question.qid for o in outcomes if o.rank is not None and o.rank <= LIMIT}


async def measure_retention(probe_for: ProbeFor, langs: Sequence[str] = ("zh", "en"), per_lang: int = 1) -> Retention:
    started = time.perf_counter()
    chats = [conversation(lang, n, early=True) for lang in langs for n in range(per_lang)]  # type: ignore[arg-type]
    compactions = archived = 0
    control: set[str] = set()
    after: set[str] = set()
    for conv in chats:
        with tempfile.TemporaryDirectory() as tmp:
            async with FakeAnthropic(responder=_responder(conv.lang)) as fake:
                settings = make_settings(
                    Path(tmp),
                    fake.base_url,
                    session={"fsync": False},
                    memory={"autocompact_min_messages": 50},
                )
                async with build_gateway(settings) as gw:
                    await store.write(gw.history, control_key(conv), conv.turns)
                    done, moved = await _compact_in_rounds(gw, conv)
                    compactions, archived = compactions + done, archived + moved
                    probe = probe_for(gw)
                    control |= _found(await evaluate(probe, [conv], keys=control_key))
                    after |= _found(await evaluate(probe, [conv]))
    planted = sum(len(c.questions) for c in chats)
    elapsed = time.perf_counter() - started
    return Retention(planted, len(control), len(control & after), len(after), compactions, archived, elapsed)


def describe(r: Retention) -> str:
    return (
        f"retention: {r.kept}/{r.control} facts found in the never-compacted copy are still found after "
        f"{ROUNDS} L2 compactions and an AutoCompact sweep = {r.ratio:.1%} "
        f"(found after: {r.after}/{r.planted} planted; {r.compactions} compactions, {r.archived} turns archived, "
        f"{r.seconds:.1f} s)"
    )
