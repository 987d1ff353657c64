"""The second stage of recall on hand-made hits: related words at half weight, newer wins, nothing shown twice."""

from __future__ import annotations

import asyncio

import pytest

from agenthub.errors import StorageError
from agenthub.search.rerank import ranked_async, rerank
from agenthub.search.when import TimeAsk
from agenthub.storage.search_index import HISTORY, MEMORY, Passage, SearchHit, SourceRef

SOURCE = SourceRef(HISTORY, "default:wecom:chat")


def _p(seq: int, text: str, speaker: str = "evan") -> Passage:
    return Passage(SOURCE, seq, "user", speaker, 1_000 * seq, text)


def _hit(seq: int, text: str, score: float, speaker: str = "evan") -> SearchHit:
    return SearchHit(_p(seq, text, speaker), score, _p(seq - 1, "before"), _p(seq + 1, "after"))


def _texts(hits: list[SearchHit]) -> list[str]:
    return [h.passage.text for h in hits]


def test_related_words_add_half_of_their_score_and_a_passage_found_only_by_them_starts_low() -> None:
    own = [_hit(10, "apartment 12C", 10.0), _hit(20, "a big apartment", 8.0, "mia")]
    widened = [_hit(30, "new address: 88 Elm Ave", 12.0, "sam"), _hit(10, "apartment 12C", 14.0)]
    out = rerank(["apart"], own, 5, widened, full=False)  # the first search found every passage with asked words
    assert _texts(out) == ["apartment 12C", "a big apartment", "new address: 88 Elm Ave"]
    assert [h.score for h in out] == [12.0, 8.0, 6.0]  # 10 + (14 - 10) / 2; 0 + 12 / 2
    out = rerank(["apart"], own, 5, widened, full=True)  # there were more: it may hold asked words, up to the last
    assert _texts(out) == ["apartment 12C", "new address: 88 Elm Ave", "a big apartment"]
    assert [h.score for h in out] == [12.0, 10.0, 8.0]  # 8 + (12 - 8) / 2


def test_a_newer_passage_of_the_same_speaker_saying_the_same_ranks_just_above_the_older() -> None:
    older = _hit(10, "my car is a Subaru Outback", 9.0)
    newer = _hit(50, "sold the Subaru Outback, got a Volvo", 4.0)
    other = _hit(80, "the Subaru Outback of my neighbour", 5.0, speaker="mia")
    out = rerank(["car"], [older, other, newer], 5)
    assert _texts(out) == ["sold the Subaru Outback, got a Volvo", "my car is a Subaru Outback", other.passage.text]
    assert out[0].score == 9.0 * 1.01
    unrelated = _hit(60, "sold the bike, got a scooter", 4.0)
    assert _texts(rerank(["car"], [older, unrelated], 5))[0] == "my car is a Subaru Outback"


def test_a_stock_sentence_said_again_is_no_restatement_of_the_passage_it_follows() -> None:
    answer = _hit(10, "We bake banana bread with the kids every Sunday. Anyway, any plans for the weekend?", 9.0)
    chat = _hit(50, "The bus was late again. Anyway, any plans for the weekend?", 4.0)
    assert _texts(rerank(["kid"], [answer, chat], 5))[0] == answer.passage.text  # the shared sentence lifts nothing
    restated = _hit(60, "Sunday banana bread with the kids again, any plans for the weekend?", 4.0)
    assert _texts(rerank(["kid"], [answer, restated], 5))[0] == restated.passage.text  # said again in other words


def test_a_passage_shown_beside_a_better_hit_comes_after_every_other() -> None:
    first = SearchHit(_p(10, "a"), 9.0, _p(9, "z"), _p(11, "b"))
    beside = SearchHit(_p(11, "b"), 8.0, _p(10, "a"), _p(12, "y"))
    apart = _hit(40, "c", 1.0)
    assert _texts(rerank(["x"], [first, beside, apart], 2)) == ["a", "c"]
    assert _texts(rerank(["x"], [first, beside, apart], 5)) == ["a", "c", "b"]
    assert rerank(["x"], [], 5) == []


def test_a_turn_of_the_speaker_the_question_names_counts_as_naming_them() -> None:
    named = _hit(10, "Evan, do you still drive that car?", 6.0, speaker="sam")
    plain = _hit(20, "the car is a Volvo now", 3.0, speaker="evan")
    other = _hit(30, "my car is red", 2.5, speaker="sam")
    nameless = [_hit(10, "Evan, do you still drive that car?", 2.0, speaker="sam"), plain, other]
    out = rerank(["car", "evan"], [named], 5, nameless=nameless, names=frozenset({"evan"}))
    assert _texts(out) == ["the car is a Volvo now", "Evan, do you still drive that car?"]  # not the other speaker's
    assert out[0].score == 3.0 + 4.0  # without the name, plus what the name added to a turn holding it (6 - 2)
    assert _texts(rerank(["car", "evan"], [named], 5, nameless=nameless)) == [named.passage.text]  # no name


def test_the_same_words_said_again_come_after_every_other_passage() -> None:
    said = _hit(10, "Our new wifi password is otter-28", 9.0)
    again = _hit(50, "our new wifi  password is OTTER-28", 8.5, speaker="sam")  # repeated: other case, spacing
    beside = SearchHit(
        _p(70, "what's the wifi password?"), 8.0, _p(69, "hi"), _p(71, "our new wifi password is otter-28")
    )
    other = _hit(90, "the office wifi password is on the fridge", 2.0)
    out = rerank(["wifi", "password"], [said, again, beside, other], 3)
    assert _texts(out) == [said.passage.text, beside.passage.text, other.passage.text]


def test_a_lift_is_from_what_the_older_passage_scored_not_from_a_lift_it_got() -> None:
    first = _hit(10, "garden tomato harvest", 10.0)
    restated = _hit(20, "garden tomato pepper balcony", 2.0)  # says the same as the first: lifted above it
    chained = _hit(30, "pepper balcony sunset", 1.0)  # shares with the restatement only, nothing with the first
    other = _hit(40, "something else entirely", 5.0, speaker="mia")
    out = rerank(["q"], [first, restated, chained, other], 5)
    assert _texts(out) == [restated.passage.text, first.passage.text, other.passage.text, chained.passage.text]
    assert out[-1].score == 2.0 * 1.01


def test_what_related_words_add_is_shared_by_those_the_passage_holds() -> None:
    exact = _hit(10, "Beagles are adorable little menaces", 10.0)
    loose = _hit(20, "a friend just adopted a puppy", 12.0, speaker="mia")  # two loose words of the topic
    related = ["beagl", "adopt", "puppi"]
    out = rerank(["breed"], [], 5, [loose, exact], full=False, related=related)
    assert _texts(out) == [exact.passage.text, loose.passage.text]
    assert [h.score for h in out] == [5.0, 0.5 * 12.0 / 2**0.5]
    assert _texts(rerank(["breed"], [], 5, [loose, exact], full=False)) == [loose.passage.text, exact.passage.text]


async def test_an_index_asked_with_await_gets_the_query_and_its_widened_form_at_once() -> None:
    both_asked = asyncio.Barrier(2)
    asked: list[list[str]] = []

    async def search(terms: list[str], limit: int) -> list[SearchHit]:
        asked.append(terms)
        if len(asked) <= 2:  # the first two asks meet here: asked one after the other, this would never return
            await asyncio.wait_for(both_asked.wait(), 5)
        return [_hit(2, "my new job starts monday", 3.0)]

    hits = await ranked_async(search, ["job"], 5, "when does the job start")
    assert _texts(hits) == ["my new job starts monday"]
    assert asked[0] == ["job"] and "work" in asked[1]


async def test_a_failing_ask_raises_its_own_error_and_ends_the_other_ask() -> None:
    other_ended = asyncio.Event()

    async def search(terms: list[str], limit: int) -> list[SearchHit]:
        if terms == ["job"]:
            await asyncio.sleep(0)
            raise StorageError("the database went away")
        try:
            await asyncio.sleep(30)
        finally:
            other_ended.set()
        return []

    with pytest.raises(StorageError):
        await ranked_async(search, ["job"], 5)
    assert other_ended.is_set()


def test_a_memory_files_time_is_no_time_a_line_of_it_was_said() -> None:
    """A memory file's lines carry the file's mtime (written today for one new note): no window bonus, no newest."""
    note = SearchHit(Passage(SourceRef(MEMORY, "", "MEMORY.md"), 3, "memory", None, 1_000, "pond: koi"), 7.0)
    said = _hit(9, "the pond got koi", 8.0)  # said at 9_000
    yesterday = TimeAsk((500, 1_500), None, frozenset())
    assert _texts(rerank(["pond"], [said, note], 5, when=yesterday)) == ["the pond got koi", "pond: koi"]
    newest = TimeAsk(None, "latest", frozenset())
    later = SearchHit(Passage(SourceRef(MEMORY, "", "MEMORY.md"), 3, "memory", None, 99_000, "pond: koi"), 7.0)
    assert _texts(rerank(["pond"], [said, later], 5, when=newest)) == ["the pond got koi", "pond: koi"]
