"""The recall benchmark's floor (bench/bench_recall.py, reduced): questions as a person asks them find their answer
among memory_search's five hits at least this often in each language, and compaction loses no fact to search."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from recall_data.generate import dataset
from recall_data.probe import RankedProbe
from recall_data.retention import ROUNDS, describe, measure_retention
from recall_data.run import measure
from recall_data.score import figures, report

CONVERSATIONS = 4
"""Per language: 8 chats of 220-380 turns, 128 questions (the bench runs 12 per language)."""
FLOOR_RECALL_AT_5 = {"zh": 0.33, "en": 0.43}
"""Somewhat below what the search measures on these chats: zh 0.375, en 0.516 with jieba words (0379728; CJK
bigrams: zh 0.531, en 0.500); the full bench: zh 0.401, en 0.479. Raise it with the search."""


async def test_questions_as_asked_find_their_answer_among_five_hits_in_both_languages(tmp_path: Path) -> None:
    outcomes = await measure(dataset(per_lang=CONVERSATIONS), tmp_path / "data", RankedProbe)
    table = "\n".join(report(outcomes, "recall floor"))
    for lang, floor in FLOOR_RECALL_AT_5.items():
        asked = figures(outcomes, lang=lang, form="asked")
        assert asked.n == 16 * CONVERSATIONS
        assert asked.recall5 >= floor, table


async def test_every_fact_found_before_compaction_is_found_after_five_compactions_and_a_sweep() -> None:
    retention = await measure_retention(lambda gw: RankedProbe(gw.search))
    assert retention.compactions == 2 * (ROUNDS + 1), describe(retention)  # a zh and an en chat
    assert retention.control >= retention.planted // 3, describe(retention)
    assert retention.kept == retention.control, describe(retention)
