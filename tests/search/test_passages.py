"""How hits read to the model: the passage cut around the matching words, its neighbours, within ~700 characters."""

from __future__ import annotations

from agenthub.search.passages import ANSWER_CHARS, excerpt, format_hits
from agenthub.search.text import query_terms
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.search_index import Passage, SearchHit, archive_source, history_source, memory_source

TS = 1_764_000_000_000


def _passage(seq: int, text: str, *, source=None, role: str = "user", speaker: str | None = None) -> Passage:
    return Passage(source or history_source("a:wecom:group-1"), seq, role, speaker, TS + seq * 60_000, text)


def test_five_long_hits_with_neighbours_fit_about_3500_characters() -> None:
    long = "无关的内容。" * 300
    hits = [
        SearchHit(
            _passage(10 * i + 1, long + f" the launch code is CODE-7Q{i} " + long, speaker="alice"),
            1.0,
            before=_passage(10 * i, "what was the code? " + long, role="assistant"),
            after=_passage(10 * i + 2, long + " thanks"),
        )
        for i in range(5)
    ]
    query = "what is the launch code?"
    text = format_hits(query, hits, query_terms(query), {})
    assert len(text) <= ANSWER_CHARS  # a reader keeping the first ~3,500 characters sees all five hits
    for i, block in enumerate(text.split("\n")[1:][::3]):
        assert f"the launch code is CODE-7Q{i}" in block  # the matching words are inside the cut
        assert block.startswith(f"{i + 1}. [session wecom:group-1] user ") and "(alice)" in block
    assert text.count("(before) assistant") == 5 and text.count("(after) user") == 5


def test_where_a_hit_comes_from() -> None:
    archived = SearchHit(_passage(1, "夜莺", source=archive_source("a:http:c1")), 1.0)
    memory_name = MemoryName.agent_memory("a")
    remembered = SearchHit(_passage(0, "- 用户的猫叫夜莺", source=memory_source(memory_name), role="memory"), 1.0)
    labels = {memory_source(memory_name).name: "agent memory"}
    text = format_hits("夜莺", [archived, remembered], ["夜莺"], labels)
    assert text.splitlines()[0] == '2 matches for "夜莺", best first:'
    assert "1. [session http:c1, archived] user " in text and "2. [agent memory] memory " in text
    assert format_hits("孔雀", [], ["孔雀"], {}) == 'no matches for "孔雀"'


def test_an_excerpt_is_one_line_within_its_budget() -> None:
    text = "line one\n\n" + "x " * 500 + "nightingale here " + "y " * 500
    cut = excerpt(text, ["nightingal"], 120)
    assert "\n" not in cut and len(cut) <= 120 and "nightingale here" in cut and cut.startswith("…")
    assert excerpt("short text", ["absent"], 120) == "short text"
    assert excerpt("z" * 500, ["absent"], 100, tail=True).startswith("…")


def test_a_hit_that_fits_is_shown_whole_and_a_short_one_leaves_its_room_to_its_neighbours() -> None:
    said = "changed the wifi password, the new one is blue_otter_28 " + "and more words " * 3
    fits = SearchHit(_passage(1, said, speaker="jo"), 1.0, after=_passage(2, "thanks!"))
    before = "my sister told me about her trip to Lisbon, " * 6 + "she found the best custard tarts near the river"
    short = SearchHit(
        _passage(11, "ha, true", speaker="jo"), 1.0, before=_passage(10, before), after=_passage(12, "ok")
    )
    text = format_hits("wifi password", [fits, short], query_terms("wifi password"), {})
    assert " ".join(said.split()) in text and "(after) user " in text
    assert "custard tarts near the river" in text  # the long turn before a short hit is shown whole


def test_a_neighbour_on_the_hit_s_day_shows_its_clock_and_the_hit_its_full_time() -> None:
    hit = SearchHit(_passage(5, "we went to the support group yesterday"), 1.0, before=_passage(4, "how was it?"))
    text = format_hits("support group", [hit], query_terms("support group"), {})
    first, second = text.splitlines()[1:]
    assert first.startswith("1. [session wecom:group-1] user 2025-") and "T" in first.split()[4]
    clock = second.split()[2].rstrip(":")
    assert second.startswith("   (before) user ") and len(clock) == 5 and clock[2] == ":"


def test_a_turn_shown_by_an_earlier_hit_is_only_named_and_a_hit_shows_its_weekday() -> None:
    between = _passage(11, "so what did you bring to the picnic in the end?")
    first = SearchHit(_passage(10, "the picnic is on Saturday", speaker="jo"), 1.0, after=between)
    second = SearchHit(_passage(12, "I brought lemon cake to the picnic", speaker="al"), 0.9, before=between)
    text = format_hits("picnic", [first, second], query_terms("picnic"), {})
    assert text.count("so what did you bring") == 1 and "   (before) see 1." in text.splitlines()
    weekday = text.splitlines()[1].split()[5]  # the hit's day of the week follows its time
    assert weekday in {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
