"""The casual set (bench/recall_data/casual_set.py), held out from all tuning, counted as the public long-conversation
benchmark counts: the real memory_search tool's text answer, cut at 3,500 characters, holds every evidence turn at
least this often in each language; and the set is what it claims (long dated chats, every question kind)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from recall_data.budget import BUDGET_CHARS, text_report
from recall_data.casual_set import SESSIONS, casual_set, fresh_set, weeks_set
from recall_data.model import Conversation
from recall_data.probe import RankedProbe
from recall_data.run import measure_both

FLOOR_IN_BUDGET = {"zh": 0.73, "en": 0.73}
"""Just below what is measured: zh 0.756, en 0.762 (0.738 before the feedback of names; before the category
members, the answer cues and the fixes to newer-wins and related-word weights: zh 0.756, en 0.524). Low on
purpose: this set was never tuned on, so it is the honest figure for chats the search has not seen; raise it with
the search, never by fitting to it."""
FRESH_FLOOR_IN_BUDGET = 0.71
"""The fresh English chats (`casual_en_fresh.py`, written before that work and never tuned on): 0.738 measured
(0.571 before the s6 work)."""
WEEKS_FLOOR_IN_BUDGET = {"zh": 0.67, "en": 0.70}
"""The weeks chats (`weeks_en.py`, `weeks_zh.py`, written for the s7 work before any change and never tuned on):
zh 0.694, en 0.723 measured (zh 0.673, en 0.681 before that work)."""


async def test_the_tool_s_first_3500_characters_hold_the_evidence_in_both_languages(tmp_path: Path) -> None:
    chats = casual_set()
    _, texts = await measure_both(chats, tmp_path, RankedProbe)
    table = "\n".join(text_report(texts, "casual set"))
    assert max(o.chars for o in texts) <= BUDGET_CHARS, table
    for lang, floor in FLOOR_IN_BUDGET.items():
        chosen = [o for o in texts if o.question.lang == lang]
        assert sum(o.found for o in chosen) / len(chosen) >= floor, table


async def test_the_fresh_english_chats_hold_their_evidence_within_3500_characters_too(tmp_path: Path) -> None:
    _, texts = await measure_both(fresh_set(), tmp_path, RankedProbe)
    table = "\n".join(text_report(texts, "fresh casual set"))
    assert max(o.chars for o in texts) <= BUDGET_CHARS, table
    assert len(texts) == 42 and sum(o.found for o in texts) / len(texts) >= FRESH_FLOOR_IN_BUDGET, table


async def test_the_weeks_chats_hold_their_evidence_within_3500_characters_in_both_languages(tmp_path: Path) -> None:
    _, texts = await measure_both(weeks_set(), tmp_path, RankedProbe)
    table = "\n".join(text_report(texts, "weeks set"))
    assert max(o.chars for o in texts) <= BUDGET_CHARS, table
    for lang, floor in WEEKS_FLOOR_IN_BUDGET.items():
        chosen = [o for o in texts if o.question.lang == lang]
        assert len(chosen) >= 40 and sum(o.found for o in chosen) / len(chosen) >= floor, table


@pytest.mark.parametrize("chats_of", [casual_set, weeks_set])
def test_the_casual_and_weeks_sets_are_four_long_dated_chats_asked_every_kind_of_question(
    chats_of: Callable[[], list[Conversation]],
) -> None:
    chats = chats_of()
    assert [c.lang for c in chats] == ["en", "en", "zh", "zh"]
    kinds = {"single", "multi", "when", "after", "pref", "changed", "para"}
    for chat in chats:
        assert len(chat.turns) >= 350 and len({t.timestamp // 86_400_000 for t in chat.turns}) == SESSIONS
        assert len({t.text for t in chat.turns}) >= 0.6 * len(chat.turns)  # small talk seldom repeats
        assert len(chat.questions) >= 20 and kinds <= {q.kind for q in chat.questions}
        turns = {t.gid: t.text.lower() for t in chat.turns}
        for q in chat.questions:
            needles = [v for k, v in q.values.items() if k.startswith("needle")]
            assert len(needles) == len(q.answers) and all(
                n in turns[g] for n, g in zip(needles, q.answers, strict=True)
            )
            if q.kind == "multi":  # two turns of two different days
                assert len(q.answers) == 2 and len({t // 86_400_000 for t in _times(chat, q.answers)}) == 2
            if q.kind == "changed":
                assert q.stale and max(q.stale) < min(q.answers)  # the older value was said first


def _times(chat: Conversation, gids: tuple[int, ...]) -> list[int]:
    return [t.timestamp for t in chat.turns if t.gid in gids]
