"""The search port's ranking formula: BM25 (k1 1.2, b 0.75, the +1 idf), a mild recency prior and the tie rule."""

from __future__ import annotations

import math

from agenthub.storage.search_index import (
    Passage,
    SourceRef,
    history_source,
    idf,
    rank_key,
    score_of,
    session_channel,
    term_score,
)


def test_idf_is_never_negative_and_a_rare_term_weighs_more() -> None:
    assert idf(100, 100) > 0
    assert idf(100, 1) > idf(100, 50)
    assert math.isclose(idf(10, 2), math.log(1 + 8.5 / 2.5))


def test_term_score_saturates_with_tf_and_prefers_shorter_docs() -> None:
    assert term_score(1.0, 2, 10, 10) < 2 * term_score(1.0, 1, 10, 10)
    assert term_score(1.0, 1, 5, 10) > term_score(1.0, 1, 20, 10)
    assert math.isclose(term_score(1.0, 1, 10, 10), 2.2 / 2.2)


def test_recency_is_a_mild_prior_and_breaks_ties_newest_first() -> None:
    assert score_of(1.0, 200, 100, 200) == 1.1 and score_of(1.0, 100, 100, 200) == 1.0
    assert score_of(1.0, None, 100, 200) == 1.0 and score_of(1.0, 150, 150, 150) == 1.0
    old = Passage(history_source("a:cli:x"), 1, "user", None, 100, "t")
    new = Passage(history_source("a:cli:x"), 2, "user", None, 200, "t")
    assert sorted([old, new], key=lambda p: rank_key(1.0, p)) == [new, old]
    assert sorted([new, old], key=lambda p: rank_key(1.0 + (p is old) * 1e-12, p)) == [new, old]  # equal at 9 dp


def test_session_channel() -> None:
    assert session_channel("a:wecom:x:y") == "wecom" and session_channel("") == ""
    assert SourceRef("memory", "", "n") < SourceRef("memory", "", "o")
