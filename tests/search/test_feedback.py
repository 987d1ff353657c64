"""Feedback from the first hits: the names, codes and titles they hold are searched again, at a lower weight."""

from __future__ import annotations

from collections.abc import Sequence

from agenthub.search.feedback import FEEDBACK_TERMS, feedback_terms
from agenthub.search.rerank import ranked, rerank
from agenthub.storage.search_index import HISTORY, Passage, SearchHit, SourceRef

SOURCE = SourceRef(HISTORY, "default:wecom:chat")


def _hit(seq: int, text: str, score: float) -> SearchHit:
    return SearchHit(Passage(SOURCE, seq, "user", "nadia", 1_000 * seq, text), score)


def test_names_codes_and_titles_of_the_best_hits_not_a_sentence_s_first_word_nor_a_day() -> None:
    hits = [
        _hit(1, "I got the job at Bluefin! Starting on Monday as an analyst.", 9.0),
        _hit(2, "改签到MU9034了，路上看完了《活着》", 8.0),
        _hit(3, "we met Ravi in Porto", 7.0),  # beyond the best two
    ]
    assert feedback_terms(hits, taken=set()) == ["bluefin", "mu9034", "活着"]  # not "starting", "monday", "i"
    assert feedback_terms(hits, taken={"bluefin"}) == ["mu9034", "活着"]  # the query's own terms are not fed back
    assert feedback_terms([_hit(1, "we fly on the 3rd at 5pm. ok see you", 1.0)], taken=set()) == []
    many = " ".join(f"and Name{chr(97 + i)}x" for i in range(20))
    assert len(feedback_terms([_hit(1, "we met " + many, 1.0)], taken=set())) == FEEDBACK_TERMS


def test_a_passage_only_the_feedback_found_comes_in_but_below_the_best_two() -> None:
    own = [_hit(10, "I got the job at Bluefin", 10.0), _hit(20, "work was long today", 9.0)]
    fed = [
        _hit(30, "handed in my notice at Bluefin, starting at Halcyon", 30.0),
        _hit(10, "I got the job at Bluefin", 20.0),
    ]
    out = rerank(["job", "work"], own, 5, fed=fed, feedback=["bluefin"], full=False)
    texts = [h.passage.text for h in out]
    assert texts == ["I got the job at Bluefin", "work was long today", fed[0].passage.text]
    assert out[2].score < out[1].score  # lifted to just below the second best, not past it
    assert [h.passage.text for h in rerank(["job", "work"], own, 5, full=False)] == texts[:2]  # without: not found


def test_a_first_search_with_one_passage_naming_a_thing_is_ranked_not_raised() -> None:
    """One passage found (no second best to stay below): the feedback search's finds are left out, not a KeyError."""
    docs = [_hit(10, "I got the job at Bluefin", 10.0), _hit(30, "handed in my notice at Bluefin", 5.0)]

    def search(terms: Sequence[str], limit: int) -> list[SearchHit]:
        return [d for d in docs if any(t in d.passage.text.lower() for t in terms)][:limit]

    assert [h.passage.text for h in ranked(search, ["job"], 5)] == ["I got the job at Bluefin"]
    fed = [docs[1], _hit(40, "Bluefin", 0.0)]  # a fed passage neither lifted nor found by the query
    out = rerank(["job"], [*docs[:1], _hit(20, "a job", 9.0)], 5, fed=fed, feedback=["bluefin"], full=False)
    assert "Bluefin" not in [h.passage.text for h in out]
