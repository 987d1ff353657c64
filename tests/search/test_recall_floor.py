"""The recall benchmark's floor (bench/bench_recall.py, reduced): questions as a person asks them find their answer
among memory_search's five hits at least this often in each language, and compaction loses no fact to search."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from recall_data.generate import dataset, heldout
from recall_data.model import Conversation, as_json
from recall_data.probe import RankedProbe
from recall_data.retention import ROUNDS, describe, measure_retention
from recall_data.run import measure
from recall_data.score import figures, report

CONVERSATIONS = 4
"""Per language: 8 chats of 220-380 turns, 128 questions (the bench runs 12 per language)."""
FLOOR_RECALL_AT_5 = {"zh": 0.93, "en": 0.96}
"""Just below what the search measures on these chats: zh 0.953, en 0.969 (before the category members, the answer
cues and the fixes to newer-wins and related-word weights: zh 0.906, en 0.969; before a repeated line was kept from
taking a second of the five hits: zh 0.891, en 0.953; the index's order alone: zh 0.781, en 0.750); the full bench:
zh 0.969, en 0.969. Raise it with the search."""
HELDOUT_FLOOR_RECALL_AT_5 = {"zh": 0.87, "en": 0.75}
"""The held-out set (8 chats on topics the search was not tuned on): zh 0.900, en 0.775 measured (0.725 before the
feedback of names; before the category members and answer cues: en 0.700; the index's order alone: zh 0.800, en
0.475; before the named speaker, framing phrases and derivations: en 0.600)."""


async def test_questions_as_asked_find_their_answer_among_five_hits_in_both_languages(tmp_path: Path) -> None:
    outcomes = await measure(dataset(per_lang=CONVERSATIONS), tmp_path, RankedProbe)
    table = "\n".join(report(outcomes, "recall floor"))
    for lang, floor in FLOOR_RECALL_AT_5.items():
        asked = figures(outcomes, lang=lang, form="asked")
        assert asked.n == 16 * CONVERSATIONS
        assert asked.recall5 >= floor, table


async def test_the_held_out_chats_find_their_answers_among_five_hits_too(tmp_path: Path) -> None:
    outcomes = await measure(heldout(), tmp_path, RankedProbe)
    table = "\n".join(report(outcomes, "held-out recall floor"))
    for lang, floor in HELDOUT_FLOOR_RECALL_AT_5.items():
        asked = figures(outcomes, lang=lang, form="asked")
        assert asked.n == 40
        assert asked.recall5 >= floor, table


async def test_every_fact_found_before_compaction_is_found_after_five_compactions_and_a_sweep() -> None:
    retention = await measure_retention(lambda gw: RankedProbe(gw.search))
    assert retention.compactions == 2 * (ROUNDS + 1), describe(retention)  # a zh and an en chat
    assert retention.control >= retention.planted // 3, describe(retention)
    assert retention.kept == retention.control, describe(retention)


def test_the_data_set_is_24_long_chats_whose_answers_hold_the_fact_the_question_does_not_give_away() -> None:
    chats = dataset()
    assert [c.lang for c in chats] == ["zh"] * 12 + ["en"] * 12
    assert all(220 <= len(c.turns) <= 380 for c in chats)
    assert len({t.timestamp for c in chats for t in c.turns}) == sum(len(c.turns) for c in chats)
    questions = [q for c in chats for q in c.questions]
    assert len(questions) == 384
    assert {q.kind for q in questions} == {"single", "restated", "changed"}
    for chat in chats:
        _check_answers(chat)
    assert as_json(dataset(per_lang=2)) == as_json(chats[:2] + chats[12:14])  # seeded: the same every time


def _check_answers(chat: Conversation) -> None:
    text = {t.gid: t.text for t in chat.turns}
    for q in chat.questions:
        facts = [v for slot, v in q.values.items() if slot != "was"]
        assert all(any(v in text[a] for v in facts) for a in q.answers), q
        assert any(v not in q.asked for v in facts if any(v in text[a] for a in q.answers)), q
        if q.kind == "restated":
            assert len({text[a] for a in q.answers}) == 2, q
        if q.kind == "changed":
            (stale,) = q.stale
            assert stale < q.answers[0] and q.values["was"] in text[stale], q
