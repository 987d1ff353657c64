"""Counting as the public long-conversation benchmark does: the real `memory_search` tool is asked the question
(default limit), its text answer is cut at BUDGET_CHARS, and a question counts as found when the distinctive part of
its answer turn is inside that cut (for a "when did" question, with the turn's date in the same hit)."""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from agenthub.agent.tools import ToolContext
from agenthub.gateway.core import GatewayCore
from agenthub.search.tool import run_memory_search
from recall_data.model import Conversation, Question, Turn
from recall_data.store import AGENT, key_of

BUDGET_CHARS = 3500
_HIT_START = re.compile(r"^\d+\. ", re.MULTILINE)


@dataclass(frozen=True)
class TextOutcome:
    question: Question
    found: bool  # the answer's distinctive part within the budget (and for "when", its date in the same hit)
    anywhere: bool  # ... anywhere in the tool's whole answer
    dated: bool | None  # "when" questions: the answer's date shown in the hit that shows it
    chars: int  # the length of the tool's whole answer


def flat(text: str) -> str:
    return " ".join(text.split()).lower()


def needles(conv: Conversation, q: Question) -> list[list[str]]:
    """For each answer turn, the parts that must show: the hand-picked parts (`needle`, `needle1`, ...: all of
    them), else the fact's values the turn states (else a piece of its middle)."""
    out = []
    for gid in q.answers:
        said = flat(_turn(conv, gid).text)
        if "needle" in q.values:  # the long and casual sets: every hand-picked part (a multi-hop question's all)
            out.append([flat(v) for k, v in q.values.items() if k.startswith("needle")])
            continue
        parts = [flat(v) for k, v in q.values.items() if k != "was" and flat(v) and flat(v) in said]
        middle = len(said) // 2
        out.append(parts or [said[max(0, middle - 15) : middle + 15]])
    return out


def _turn(conv: Conversation, gid: int) -> Turn:
    return next(t for t in conv.turns if t.gid == gid)


def date_of(ts_ms: int) -> str:
    """The answer's date as the tool prints times (the ToolContext's zone, UTC by default)."""
    return dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC).date().isoformat()


def judge(conv: Conversation, q: Question, answer: str) -> TextOutcome:
    whole = answer.lower()
    cut = whole[:BUDGET_CHARS]
    flat_cut, flat_whole = flat(cut), flat(whole)
    sets = needles(conv, q)
    found = any(all(n in flat_cut for n in parts) for parts in sets)
    anywhere = any(all(n in flat_whole for n in parts) for parts in sets)
    dated = None
    if q.kind == "when":
        dated = any(
            _dated(cut, parts[0], date_of(_turn(conv, gid).timestamp))
            for gid, parts in zip(q.answers, sets, strict=True)
        )
        found = found and dated
    return TextOutcome(q, found, anywhere, dated, len(answer))


def _dated(cut: str, needle: str, date: str) -> bool:
    """Whether a hit holding `needle` (its lines joined) also shows `date`."""
    starts = [m.start() for m in _HIT_START.finditer(cut)] + [len(cut)]
    blocks = [cut[a:b] for a, b in itertools.pairwise(starts)] or [cut]
    return any(needle in flat(block) and date in block for block in blocks)


async def evaluate_text(gw: GatewayCore, conversations: Sequence[Conversation]) -> list[TextOutcome]:
    """Every question as asked, through the real tool in its own chat (as its first speaker)."""
    agent = gw.agents.get(AGENT)
    outcomes = []
    for conv in conversations:
        ctx = ToolContext(
            agent=agent,
            key=key_of(conv),
            sender_id=conv.speakers[0],
            memory=gw.memory_files,
            workspace=gw.settings.workspace_dir / AGENT,
            search=gw.search,
            chat_type="group",
        )
        for q in conv.questions:
            outcomes.append(judge(conv, q, await run_memory_search({"query": q.asked}, ctx)))
    return outcomes


def text_report(outcomes: Sequence[TextOutcome], title: str) -> list[str]:
    lines = [title, f"  {'lang':5s} {'n':>4s} {'in 3500':>8s} {'anywhere':>9s} {'avg chars':>9s}  when: dated"]
    for lang in ("zh", "en", None):
        chosen = [o for o in outcomes if lang in (None, o.question.lang)]
        n = max(1, len(chosen))
        found = sum(o.found for o in chosen) / n
        anywhere = sum(o.anywhere for o in chosen) / n
        chars = sum(o.chars for o in chosen) / n
        when = [o for o in chosen if o.dated is not None]
        dated = f"{sum(bool(o.dated) for o in when)}/{len(when)}" if when else "-"
        lines.append(f"  {lang or 'all':5s} {len(chosen):4d} {found:8.3f} {anywhere:9.3f} {chars:9.0f}  {dated}")
    return lines
