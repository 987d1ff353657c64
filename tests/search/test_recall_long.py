"""The long set (bench/recall_data/long_set.py) counted as the public long-conversation benchmark counts: the real
memory_search tool's text answer, cut at 3,500 characters, holds the answer turn at least this often in each
language; and the set is what it claims (long dated chats, varied small talk, answers that hold their part)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from recall_data.budget import BUDGET_CHARS, text_report
from recall_data.long_set import HELDOUT, long_set
from recall_data.probe import RankedProbe
from recall_data.run import measure_both

FLOOR_IN_BUDGET = {"zh": 0.84, "en": 0.85}
"""Just below what is measured: zh 0.865, en 0.875 (held-out half zh 0.808, en 0.885; before the category members,
the answer cues and the fixes to newer-wins and related-word weights: zh 0.808, en 0.798, held-out half en 0.846)."""


async def test_the_tool_s_first_3500_characters_hold_the_answer_in_both_languages(tmp_path: Path) -> None:
    chats = long_set()
    _, texts = await measure_both(chats, tmp_path, RankedProbe)
    table = "\n".join(text_report(texts, "long set"))
    assert max(o.chars for o in texts) <= BUDGET_CHARS, table  # five hits and their neighbours fit the budget
    for lang, floor in FLOOR_IN_BUDGET.items():
        chosen = [o for o in texts if o.question.lang == lang]
        assert sum(o.found for o in chosen) / len(chosen) >= floor, table
    when = [o for o in texts if o.question.kind == "when" and o.found]
    assert when and all(o.dated for o in when), table  # a "when did" answer shows its day


def test_the_long_set_is_six_long_dated_chats_with_varied_small_talk_half_held_out() -> None:
    chats = long_set()
    assert [c.lang for c in chats] == ["en"] * 4 + ["zh"] * 2
    assert {c.cid for c in long_set(part="heldout")} == HELDOUT == {"long-en-2", "long-en-3", "long-zh-1"}
    for chat in chats:
        assert len(chat.turns) >= 300 and len({t.timestamp // 86_400_000 for t in chat.turns}) >= 10
        assert len({t.text for t in chat.turns}) >= 0.6 * len(chat.turns)  # not one line repeated
        assert set(chat.speakers) == {t.speaker for t in chat.turns}
        assert len(chat.questions) >= 25
        assert {"single", "when", "did", "changed", "other"} <= {q.kind for q in chat.questions}
        turns = {t.gid: t for t in chat.turns}
        for q in chat.questions:
            answer = turns[q.answers[0]]
            assert q.values["needle"] in answer.text
            if q.kind == "other":  # said about the other person, by the one who did not live it
                assert answer.speaker not in q.asked
            for stale in q.stale:
                assert turns[stale].timestamp < answer.timestamp and turns[stale].speaker == answer.speaker
