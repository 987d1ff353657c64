"""The search tokenizer: CJK bigrams and characters (jieba words to compare), stemmed English, whole identifiers."""

from __future__ import annotations

import random
import unicodedata

from agenthub.search.text import MAX_QUERY_TERMS, index_terms, normalise, query_terms


def test_chinese_is_cut_into_bigrams_then_characters_and_a_name_out_of_any_dictionary_is_its_bigram() -> None:
    assert index_terms("暗号是夜莺") == ["暗号", "号是", "是夜", "夜莺", "暗", "号", "是", "夜", "莺"]
    terms = index_terms("我们的暗号是夜莺，张伟明天来上海")
    assert "暗号" in terms and "夜莺" in terms and "上海" in terms and "张伟" in terms
    assert index_terms("好") == ["好"]  # a one-character run is that character once
    assert query_terms("暗号是夜莺") == ["暗号", "号是", "是夜", "夜莺", "暗", "号", "夜", "莺"]  # 是 is a stop word
    assert "租" in index_terms("房租一个月3800") and "租" in query_terms("租房花多少")  # word order differs, 租 matches


def test_word_mode_segments_into_jieba_words_and_a_glued_name_still_has_its_bigrams() -> None:
    terms = index_terms("我们的暗号是夜莺，张伟明天来上海", cjk="words")
    assert "暗号" in terms and "夜莺" in terms and "上海" in terms
    assert "张伟" in terms  # jieba glues 张伟明; its bigrams keep 张伟 findable
    assert query_terms("暗号是夜莺", cjk="words") == ["暗号", "夜莺"]


def test_question_words_leave_the_query_before_it_is_cut() -> None:
    assert query_terms("陈晨哪天出生的？") == ["陈晨", "陈", "晨", "出生", "出", "生"]  # no 晨哪, 哪天, 生的
    assert query_terms("孙琪的房租是多少") == ["孙琪", "孙", "琪", "房租", "租是", "房", "租"]  # no 琪的, 的房: 的 cuts
    assert query_terms("什么") == ["什么", "什", "么"]  # nothing else: kept rather than nothing


def test_chinese_particles_cut_a_query_so_no_pair_spans_a_word_s_edge() -> None:
    terms = query_terms("阿梅的母亲出了什么事？")
    assert {"阿梅", "母亲"} <= set(terms)
    assert not {"梅的", "的母", "出了"} & set(terms)  # 出了 would match 翻出了 in any chat
    assert "出了" in index_terms("翻出了好多东西")  # stored text is cut as before


def test_still_and_what_happened_frame_a_question_and_leave_it() -> None:
    assert query_terms("Is Ben still coaching?") == ["ben", "coach"]  # the older statement says "still"
    assert "happen" not in query_terms("What happened when Rosa went to Glasgow?")
    assert query_terms("still") == ["still"]  # nothing else: kept rather than nothing


def test_how_long_how_many_and_recently_frame_a_question_and_leave_it() -> None:
    assert query_terms("How long has Rosa been teaching?") == ["rosa", "teach", "taught"]
    assert query_terms("How many kids does Tom have?") == ["kid", "tom"]
    assert query_terms("What did Ana paint recently?") == query_terms("what did Ana paint lately") == ["ana", "paint"]
    assert query_terms("long walks") == ["long", "walk"]  # outside the frame the word stays


def test_bigram_mode_cuts_every_cjk_run_into_overlapping_pairs() -> None:
    assert index_terms("暗号是夜莺", cjk="bigrams") == ["暗号", "号是", "是夜", "夜莺"]
    assert index_terms("好", cjk="bigrams") == ["好"]


def test_english_is_lowercased_and_stemmed_and_stop_words_leave_the_query() -> None:
    assert query_terms("What kind of car does Evan drive?") == ["car", "evan", "drive", "drove", "driven"]
    assert query_terms("which kinds of cars") == ["kind", "car"]
    assert query_terms("Do you remember where Lena trains these days?") == ["lena", "train"]  # framing phrases
    assert query_terms("Did you know Evan nowadays?") == ["evan"]
    assert index_terms("Evan drives") == ["evan", "drive"]
    assert index_terms("Evan’s CARS") == ["evan", "car"]


def test_identifiers_numbers_dates_and_codes_are_kept_whole_and_in_parts() -> None:
    assert index_terms("CODE-7Q2") == ["code-7q2", "code", "7q2"]
    assert index_terms("on 2026-12-01") == ["on", "2026-12-01", "2026", "12", "01"]
    assert index_terms("v2.3.1") == ["v2.3.1", "v2", "3", "1"]
    assert index_terms("user_id") == ["user_id", "user", "id"]
    assert query_terms("请问CODE-7Q2是什么") == ["code-7q2", "code", "7q2"]


def test_mixed_chinese_and_english_and_full_width_forms() -> None:
    assert query_terms("用Python写的夜莺 ＡＰＩ") == ["用", "python", "写", "夜莺", "夜", "莺", "api"]


def test_stop_words_only_query_keeps_them_rather_than_nothing() -> None:
    assert query_terms("the who") == ["the", "who"]
    assert query_terms("是 的") == ["是", "的"]


def test_bad_input_is_text_never_syntax() -> None:
    assert query_terms("") == [] and query_terms("   ") == []
    assert query_terms("!!! ？？？ ……") == []
    assert query_terms('"nightingale" AND pass* NEAR(a b) title:x') == [
        "nightingal",
        "pass",
        "near",
        "b",
        "title:x",
        "titl",
        "x",
    ]
    assert query_terms("'; DROP TABLE docs; --") == ["drop", "tabl", "doc"]
    assert query_terms("夜莺\x00\x1b[31m\x7fcode") == ["夜莺", "夜", "莺", "31m", "code"]


def test_a_huge_query_is_cut_not_refused() -> None:
    huge = " ".join(f"word{i}" for i in range(10_000))
    terms = query_terms(huge)
    assert len(terms) == MAX_QUERY_TERMS and terms[0] == "word0"
    assert query_terms("夜莺" * 100_000) == ["夜莺", "莺夜", "夜", "莺"]


def test_a_query_also_searches_the_irregular_forms_stemming_does_not_join() -> None:
    assert query_terms("who sold the car") == ["sold", "car", "sell"]
    assert query_terms("what did she buy for the children") == ["buy", "children", "bought", "child"]
    assert index_terms("sold the children's bikes") == ["sold", "the", "children", "bike"]  # stored text as is


def test_normalise_is_nfkc_for_any_text_also_where_the_full_width_table_does_the_work() -> None:
    rng = random.Random(5)
    pool = [chr(c) for c in [*range(0x20, 0x7F), *range(0xFF00, 0xFFF0), *range(0x3000, 0x3020)]]
    pool += [chr(c) for c in (0x301, 0x308, 0x323, 0x2019, 0x2460, 0x3392, 0xFB01, 0x212B, 0x4E00, 0x1100, 0x1161)]
    pool += [chr(c) for c in (0x30AB, 0x3099, 0xFF76, 0xFF9E, 0x2126)]
    for _ in range(20_000):
        text = "".join(rng.choices(pool, k=rng.randint(0, 10)))
        assert normalise(text) == unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")


def test_a_token_seen_before_gives_the_same_terms() -> None:
    text = "我们的暗号是夜莺，CODE-7Q2 drives；Ｅｖａｎ’s cars"
    assert index_terms(text) == index_terms(text) == index_terms(text, cjk="grams")
    assert index_terms(text, cjk="bigrams") != index_terms(text)  # one cache per mode
    long_run = "我们下周再讨论一下这个事情然后决定预算和排期的安排"  # longer than what is cached: cut every time
    assert index_terms(long_run) == index_terms(long_run)
    assert index_terms(long_run)[:2] == ["我们", "们下"] and len(index_terms(long_run)) == 2 * len(long_run) - 1


def test_colloquial_chinese_question_words_frame_a_question_and_leave_it() -> None:
    for asked, plain in (("她周末在干嘛", "她周末在"), ("宠物叫啥", "宠物叫"), ("咋去公司", "去公司")):
        assert query_terms(asked) == query_terms(plain)


def test_a_chinese_question_asking_what_someone_does_asks_for_their_job() -> None:
    assert query_terms("老赵是干什么的？") == ["老赵", "老", "赵", "工作", "工", "作"]  # not nothing but the name
    assert "工作" not in query_terms("大伟在婚礼上做了什么？")  # what he did there, no job
