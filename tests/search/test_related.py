"""The related words a query is widened with: a small thesaurus of everyday life, in Chinese and English."""

from __future__ import annotations

from agenthub.search.categories import MAX_MEMBERS
from agenthub.search.related import MAX_DERIVED, MAX_RELATED, derived_forms, related_terms
from agenthub.search.text import STOP_WORDS, query_terms


def test_a_question_is_widened_with_the_words_its_answer_may_use_instead() -> None:
    extra = related_terms(query_terms("Which unit does Nadia live in?"))
    assert {"apart", "address", "leas"} <= set(extra)  # apartment, address, lease, stemmed like stored text
    assert "nadia" not in extra and "unit" not in extra and "live" not in extra  # not the query's own terms
    assert {"car", "新车"} <= set(related_terms(query_terms("王磊现在开什么车？")))
    assert "提琴" in related_terms(query_terms("Which instrument does she play?"))  # both languages


def test_everyday_kin_and_work_words_reach_their_colloquial_forms() -> None:
    assert {"老公", "husband"} <= set(related_terms(query_terms("阿梅丈夫的工作是什么？")))
    assert "我妈" in related_terms(query_terms("她母亲出了什么事？"))  # as people say it: 我妈摔了一跤
    assert "工作" in related_terms(query_terms("他靠什么谋生？"))
    assert "作家" in related_terms(query_terms("Who is her favourite author?"))
    assert "twin" in related_terms(query_terms("When were the babies born?"))


def test_chinese_words_widen_by_their_pairs_not_their_single_characters() -> None:
    extra = related_terms(query_terms("她家的宠物叫什么？"))
    assert "领养" in extra and "小狗" in extra
    assert "领" not in extra and "小" not in extra  # a single character of a word would match nearly everything
    assert "猫" in extra and "狗" in extra  # a one-character word stands alone


def test_no_stop_word_and_no_more_than_the_cap() -> None:
    extra = related_terms(query_terms("car home job trip food coffee music book pet school phone laptop"))
    assert len(extra) == MAX_RELATED + MAX_MEMBERS + MAX_DERIVED  # thesaurus words, category members, derivations
    assert not set(extra) & STOP_WORDS
    assert related_terms(query_terms("7Q2 夜莺 2026-12-01")) == []  # a code, a name, a date: none


def test_english_derivations_stemming_leaves_apart_widen_a_query_too() -> None:
    assert "mover" in related_terms(query_terms("When is Maria moving out?"))  # "the movers pushed us back"
    assert {"diet"} <= set(related_terms(query_terms("any dietary needs?")))
    assert derived_forms("run")[:2] == ["runer", "runner"] and "counselor" in derived_forms("counsel")
    assert derived_forms("painter") == ["paint", "painte"]  # a derivation goes back to its base only
    assert derived_forms("7q2") == [] and derived_forms("go") == [] and derived_forms("王磊") == []
    assert (
        len(related_terms(query_terms("What did Maria study in college?"))) <= MAX_RELATED + MAX_MEMBERS + MAX_DERIVED
    )


def test_engaged_night_shifts_and_singing_reach_how_an_answer_says_them() -> None:
    assert "propos" in related_terms(query_terms("Who is Dev engaged to?"))  # "I proposed to Asha"
    assert "求婚" in related_terms(query_terms("老赵的未婚妻叫什么？"))
    assert {"shift", "白班"} <= {*query_terms("Does Dev still work nights?"), *related_terms(["shift"])}
    assert "alto" in related_terms(query_terms("What does Leona sing in the choir?"))
