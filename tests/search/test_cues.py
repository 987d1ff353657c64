"""The kind of answer a question asks for (when, how many, where) and the passages that hold one, lifted a little."""

from __future__ import annotations

from agenthub.search.cues import answer_cue
from agenthub.search.rerank import CUE_BONUS, rerank
from agenthub.storage.search_index import HISTORY, Passage, SearchHit, SourceRef

SOURCE = SourceRef(HISTORY, "default:wecom:chat")


def _hit(seq: int, text: str, score: float) -> SearchHit:
    return SearchHit(Passage(SOURCE, seq, "user", "ana", 1_000 * seq, text), score)


def _kind(question: str) -> str | None:
    cue = answer_cue(question)
    return None if cue is None else cue.kind


def test_the_question_word_tells_the_kind_of_answer() -> None:
    assert [_kind(q) for q in ("When did Ana move?", "陈晨什么时候出生？")] == ["when", "when"]
    assert [_kind(q) for q in ("How many cats does she have?", "房租多少钱？")] == ["number", "number"]
    assert _kind("Where does Ana work now?") == "where"
    assert _kind("Where did you go, and when?") == "where"  # the first one asked
    assert _kind("What car does Evan drive?") is None and _kind("夜莺 排练") is None
    assert _kind("她住哪儿？") is None  # a Chinese place has no mark to see: not asked for


def test_a_passage_holds_the_kind_of_answer_or_not() -> None:
    when = answer_cue("when did she go?")
    assert when is not None
    assert when.answers("went to the support group yesterday") and when.answers("我们上周六去的")
    assert when.answers("on the 14th") and not when.answers("the support group was lovely")
    number = answer_cue("how many?")
    assert number is not None and number.answers("two cats") and number.answers("养了三只猫")
    assert not number.answers("some cats")
    where = answer_cue("where?")
    assert where is not None and where.answers("we moved to Lisbon") and not where.answers("we moved, finally")


def test_of_two_passages_on_the_topic_the_one_holding_the_asked_kind_comes_first() -> None:
    plain = _hit(10, "the support group was lovely, everyone was kind", 10.0)
    dated = _hit(20, "I went to the support group yesterday", 9.0)
    out = rerank(["support", "group"], [plain, dated], 5, cue=answer_cue("When did Ana go to the support group?"))
    assert [h.passage.text for h in out] == [dated.passage.text, plain.passage.text]
    assert out[0].score == 9.0 * (1 + CUE_BONUS)
    far = _hit(30, "I went to the support group yesterday", 5.0)
    out = rerank(["support", "group"], [plain, far], 5, cue=answer_cue("When did Ana go to the support group?"))
    assert out[0].passage.text == plain.passage.text  # a lift, not a filter
    assert [h.score for h in rerank(["support", "group"], [plain, dated], 5)] == [10.0, 9.0]  # no cue: as scored


def test_a_question_for_a_title_or_a_code_lifts_the_passage_holding_one() -> None:
    assert _kind("赵凯在看哪本小说？") == "title" and _kind("Which book is Ana reading?") == "title"
    assert _kind("What's Tom's flight number?") == "code" and _kind("何静的车次是多少？") in {"code", "number"}
    title = answer_cue("赵凯在看哪本小说？")
    assert title is not None and title.answers("刚开始读《活着》，看了三章") and not title.answers("看了三章")
    code = answer_cue("What's Tom's flight number?")
    assert code is not None and code.answers("I'm on B6 756") and code.answers("改签到G107")
    assert not code.answers("the flight was fine")


def test_a_question_for_a_person_lifts_the_passage_naming_one() -> None:
    assert _kind("Who is moving in with Daniel?") == "who" and _kind("何静在和谁谈恋爱？") == "who"
    who = answer_cue("Who is moving in with Daniel?")
    assert who is not None and who.answers("mom's moving in with us") and who.answers("I went with Jo")
    assert who.answers("我和同事去的") and not who.answers("moving in next week")
