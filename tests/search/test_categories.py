"""A category word widens a query with its members: the question names the kind of thing, the answer the thing."""

from __future__ import annotations

from agenthub.search.categories import MAX_MEMBERS, member_terms
from agenthub.search.related import related_terms
from agenthub.search.text import STOP_WORDS, query_terms


def test_a_category_word_reaches_its_members_in_both_languages() -> None:
    assert {"tenni", "swim", "badminton"} <= set(member_terms(query_terms("What sport does she play?")))
    assert {"羽毛", "毛球", "游泳"} <= set(member_terms(query_terms("她喜欢什么运动？")))
    assert "cello" in related_terms(query_terms("Which instrument does Ana practise?"))


def test_a_member_does_not_reach_its_category_or_the_other_members() -> None:
    assert member_terms(query_terms("Does she play tennis?")) == []
    assert "sport" not in related_terms(query_terms("tennis"))


def test_a_chinese_query_takes_the_chinese_members_first_and_no_more_than_the_cap() -> None:
    members = member_terms(query_terms("他们家有什么宠物和乐器？"))
    assert len(members) == MAX_MEMBERS and not set(members) & STOP_WORDS
    assert not members[0].isascii()
    assert members[0] not in {"宠", "物"}  # a Chinese word widens by its pairs, a single character only alone


def test_a_misleading_phrase_is_searched_as_what_it_means() -> None:
    assert query_terms("What does Nora do for a living?") == ["nora", "job"]  # not "live", a home word
    assert "teacher" in related_terms(query_terms("What does Nora do for a living?"))
    assert "paint" in related_terms(query_terms("What does Jo do in her free time?"))


def test_a_question_about_a_car_reaches_the_makes_an_answer_names() -> None:
    assert {"prius", "volvo"} <= set(related_terms(query_terms("What car does Evan drive?")))
    assert {"比亚", "亚迪", "小鹏"} <= set(related_terms(query_terms("周杰的新车是哪款？")))


def test_how_someone_gets_around_reaches_the_ways_of_getting_about() -> None:
    assert {"cycl", "scooter", "bus"} <= set(related_terms(query_terms("How does Dev get around these days?")))
    assert {"单车", "电动"} <= set(related_terms(query_terms("老赵买了个什么代步工具？")))
    assert {"单车", "地铁"} <= set(related_terms(query_terms("老赵现在怎么出门？")))


def test_a_pet_a_dialect_and_a_surgery_reach_their_everyday_kinds() -> None:
    assert "tabbi" in related_terms(query_terms("What is the name of Marco's cat?"))
    assert "粤语" in related_terms(query_terms("晓彤为什么要学一门方言？"))
    assert "tonsil" in related_terms(query_terms("What surgery did the boy have?"))


def test_a_job_question_reaches_the_everyday_occupations_past_the_first_few() -> None:
    assert {"hygienist", "paramed"} <= set(related_terms(query_terms("What does Tessa do for work?")))
    assert {"药剂", "剂师", "出纳"} <= set(related_terms(query_terms("晓彤是做什么工作的？")))
