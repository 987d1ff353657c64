"""Ranked recall through `SearchService.search`: BM25 order, recency as a tie-breaker, Chinese words and exact
codes, neighbouring turns, bad queries, and many writers while searching (real files, real SQLite)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from agenthub.search.service import SearchService
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from agenthub.storage.search_index import ARCHIVE, HISTORY, SearchHit, SearchScope

T0 = 1_764_000_000_000
MINUTE = 60_000
EVERYWHERE = SearchScope(None, agent_scoped=lambda _: True)
CHAT = SessionKey("default", "http", "chat")


def _msg(role: str, text: str, ts: int, sender: str | None = None) -> dict[str, Any]:
    return {"role": role, "content": text, "timestamp": ts, **({"sender_id": sender} if sender else {})}


class Recall:
    def __init__(self, data_dir: Path) -> None:
        self.history = SessionHistory(data_dir, fsync=False)
        self.service = SearchService(data_dir, sync_delay_s=0.05)
        self.history.observers.append(self.service.history_changed)
        self.clock = T0

    async def say(self, *texts: str, key: SessionKey = CHAT) -> None:
        for text in texts:
            self.clock += MINUTE
            role = "user" if self.clock // MINUTE % 2 else "assistant"
            await self.history.append(key, _msg(role, text, self.clock, "alice" if role == "user" else None))

    async def texts(self, query: str, limit: int = 5, scope: SearchScope = EVERYWHERE) -> list[str]:
        return [h.passage.text for h in await self.service.search("default", query, scope, limit)]


@pytest_asyncio.fixture
async def recall(tmp_path: Path) -> AsyncIterator[Recall]:
    r = Recall(tmp_path / "data")
    try:
        yield r
    finally:
        await r.service.close()


FILLER = [
    "we had a meeting about the budget today",
    "the meeting moved to Tuesday afternoon",
    "please send the meeting notes to the team",
    "今天的会议讨论了预算和排期",
    "明天下午三点开会，记得带电脑",
    "another meeting with the design team",
]


async def test_a_rare_term_outranks_a_frequent_one(recall: Recall) -> None:
    await recall.say(*FILLER, *FILLER)
    await recall.say("the nightingale sang all night")
    texts = await recall.texts("meeting nightingale")
    assert texts[0] == "the nightingale sang all night"  # one rare word beats the common one in many messages
    assert all("meeting" in t for t in texts[1:])


async def test_the_question_as_asked_finds_the_answer_turn(recall: Recall) -> None:
    await recall.say(*FILLER)
    await recall.say("Evan just bought a new car, a red Toyota Corolla", "nice, does he like driving it?")
    await recall.say(*FILLER)
    assert (await recall.texts("What kind of car does Evan drive?"))[0].startswith("Evan just bought a new car")
    await recall.say("我女儿下个月要去杭州读大学了")
    assert (await recall.texts("她女儿去哪里读大学？"))[0] == "我女儿下个月要去杭州读大学了"


async def test_the_person_asked_about_is_found_by_their_sender_id_once_not_by_their_short_turns(
    recall: Recall,
) -> None:
    key = SessionKey("default", "wecom", "group")
    turns = [("evan", "lol"), ("mia", "evan, how was the weekend?"), ("evan", "just picked up my new Prius")]
    turns += [("mia", "my new bike is great"), ("evan", "ok"), ("evan", "haha")]
    for sender, text in turns:
        recall.clock += MINUTE
        await recall.history.append(key, _msg("user", text, recall.clock, sender))
    # "evan" is only the sender id of the answer; his two-letter turns share nothing else with the question
    assert (await recall.texts("what is new with Evan?"))[0] == "just picked up my new Prius"
    assert (await recall.texts("what is new with Mia?"))[0] == "my new bike is great"


async def test_a_later_turn_that_names_what_the_best_hit_names_is_reached_without_the_query_s_words(
    recall: Recall,
) -> None:
    await recall.say("I got a job at Bluefin, I start on Monday", *FILLER)
    await recall.say("so I handed in my notice at Bluefin. starting at Halcyon Health next week", *FILLER)
    await recall.say("the job fair was packed")
    texts = await recall.texts("Which company gave Nadia a job?")
    assert "I got a job at Bluefin, I start on Monday" in texts[:2]
    assert "so I handed in my notice at Bluefin. starting at Halcyon Health next week" in texts[2:]  # below the two


async def test_a_restated_fact_and_its_update_rank_the_newer_first(recall: Recall) -> None:
    await recall.say("our launch date is 2026-11-01", *FILLER)
    await recall.say("our launch date is 2026-12-01", *FILLER)
    assert (await recall.texts("when is our launch date?"))[:2] == [
        "our launch date is 2026-12-01",
        "our launch date is 2026-11-01",
    ]
    await recall.say("我住在上海", *FILLER, "我住在杭州")
    assert (await recall.texts("我住在哪里"))[:2] == ["我住在杭州", "我住在上海"]
    await recall.say("暗号是夜莺", *FILLER)
    await recall.say("暗号是夜莺")  # restated word for word: the newer copy first
    hits = await recall.service.search("default", "暗号", EVERYWHERE, 2)
    assert [h.passage.text for h in hits] == ["暗号是夜莺", "暗号是夜莺"]
    assert hits[0].passage.ts is not None and hits[1].passage.ts is not None
    assert hits[0].passage.ts > hits[1].passage.ts


async def test_chinese_words_codes_dates_and_versions_match_exactly(recall: Recall) -> None:
    await recall.say(*FILLER)
    await recall.say(
        "顺便说一下，我们的暗号是夜莺",
        "the voucher is CODE-7Q2, valid until 2026-12-01",
        "升级到 v2.3.1 之后 user_id 字段改名了",
        "张伟明天来上海",
        "the code 7Q3 is a different one",
    )
    assert (await recall.texts("夜莺"))[0] == "顺便说一下，我们的暗号是夜莺"
    assert (await recall.texts("暗号是什么"))[0] == "顺便说一下，我们的暗号是夜莺"
    assert (await recall.texts("CODE-7Q2"))[0] == "the voucher is CODE-7Q2, valid until 2026-12-01"
    assert (await recall.texts("code-7q2"))[0] == "the voucher is CODE-7Q2, valid until 2026-12-01"
    assert (await recall.texts("what happens on 2026-12-01?"))[0].startswith("the voucher is CODE-7Q2")
    assert (await recall.texts("v2.3.1"))[0].startswith("升级到 v2.3.1")
    assert (await recall.texts("user_id"))[0].startswith("升级到 v2.3.1")
    assert (await recall.texts("张伟"))[0] == "张伟明天来上海"  # jieba glues 张伟明; its bigrams still find it
    assert await recall.texts("孔雀") == []


async def test_mixed_chinese_and_english_queries(recall: Recall) -> None:
    await recall.say(*FILLER, "部署用的是 Kubernetes 集群，在北京机房", "the deployment uses Docker on a laptop")
    assert (await recall.texts("Kubernetes 集群在哪个机房"))[0] == "部署用的是 Kubernetes 集群，在北京机房"
    assert (await recall.texts("北京的 cluster 用 kubernetes 吗"))[0] == "部署用的是 Kubernetes 集群，在北京机房"


async def test_a_hit_carries_its_neighbouring_turns_with_speaker_time_and_chat(recall: Recall) -> None:
    await recall.say("what is the wifi password?", "it is nightingale-42", "thanks!")
    (hit,) = await recall.service.search("default", "nightingale-42", EVERYWHERE, 1)
    assert isinstance(hit, SearchHit)
    assert hit.passage.text == "it is nightingale-42" and hit.passage.session == str(CHAT)
    assert hit.passage.kind == HISTORY and hit.passage.ts == T0 + 2 * MINUTE
    assert hit.before is not None and hit.before.text == "what is the wifi password?"
    assert hit.before.speaker == "alice" and hit.before.role == "user" and hit.before.ts == T0 + MINUTE
    assert hit.after is not None and hit.after.text == "thanks!" and hit.after.ts == T0 + 3 * MINUTE


async def test_compacted_text_is_found_in_the_archive_with_its_neighbours(recall: Recall) -> None:
    await recall.say("first", "the safe code is 9913", "third", *FILLER)
    kept = await recall.history.load(CHAT)
    await recall.history.replace(CHAT, [{"role": "system", "content": "[历史摘要] 保险箱密码已告知"}, *kept[-3:]])
    (hit,) = await recall.service.search("default", "safe code", EVERYWHERE, 1)
    assert hit.passage.kind == ARCHIVE and hit.passage.text == "the safe code is 9913"
    assert hit.before is not None and hit.before.text == "first"
    assert (await recall.texts("保险箱密码"))[0] == "[历史摘要] 保险箱密码已告知"


async def test_bad_queries_are_searched_as_text_never_as_syntax(recall: Recall) -> None:
    await recall.say(*FILLER, 'he said "NEAR(a b)" AND title:x OR 1=1; DROP TABLE docs; -- *', "普通的一句话")
    syntax = 'he said "NEAR(a b)" AND title:x OR 1=1; DROP TABLE docs; -- *'
    for query in ['"NEAR(a b)"', "title:x", "DROP TABLE docs; --", "1=1", "*", "AND OR NOT", "a) OR (b"]:
        texts = await recall.texts(query)
        assert texts == [] or texts[0] == syntax, (query, texts)
    assert await recall.texts("") == [] and await recall.texts("？！…、") == []
    assert (await recall.texts("\x00\x1b[0m普通\x7f的一句话\u200b"))[0] == "普通的一句话"
    huge = " ".join(["meeting"] * 50_000) + " 预算" * 10_000
    assert len(await recall.texts(huge)) == 4  # cut to its first 2000 characters: "meeting" (4 messages) is left
    assert await recall.texts("'; DELETE FROM postings; --") == []  # words no message holds
    assert len(await recall.texts("meeting", limit=20)) == 4  # nothing was dropped by the queries above


async def test_32_writers_while_searching_are_all_found_afterwards(recall: Recall) -> None:
    start = asyncio.Event()
    found_during: list[int] = []

    async def write(i: int) -> None:
        await start.wait()
        key = SessionKey("default", "http", f"writer-{i}")
        for j in range(5):
            await recall.history.append(key, _msg("user", f"writer{i} message{j} 并发写入{i}号", T0 + i * 10 + j))

    async def search() -> None:
        await start.wait()
        for _ in range(10):
            found_during.append(len(await recall.texts("message0", limit=20)))

    tasks = [asyncio.create_task(write(i)) for i in range(32)] + [asyncio.create_task(search()) for _ in range(3)]
    start.set()
    await asyncio.gather(*tasks)
    assert len(found_during) == 30 and max(found_during) <= 20
    for i in range(32):
        texts = await recall.texts(f"writer{i}", limit=20)
        assert sorted(texts) == [f"writer{i} message{j} 并发写入{i}号" for j in range(5)], i
    assert (await recall.service.stats("default"))["docs"] == 160


async def test_a_question_in_other_words_finds_its_answer_through_related_words(recall: Recall) -> None:
    await recall.say(*FILLER, "new address for your contacts: 88 Elm Ave, apartment 12C", *FILLER)
    await recall.say("I could never move to a big city", "the living room needs a new lamp")
    assert (await recall.texts("Where does alice live?"))[:3].count(
        "new address for your contacts: 88 Elm Ave, apartment 12C"
    ) == 1
    await recall.say("终于提车了！比亚迪汉，开起来特别顺", *FILLER)
    assert (await recall.texts("她开的是什么车？"))[0] == "终于提车了！比亚迪汉，开起来特别顺"


async def test_a_passage_holding_the_asked_words_outranks_one_holding_only_related_words(recall: Recall) -> None:
    await recall.say("the apartment upstairs is loud", *FILLER, "I live near the river now", *FILLER)
    assert await recall.texts("where do I live", limit=2) == [
        "I live near the river now",
        "the apartment upstairs is loud",
    ]


async def test_irregular_forms_of_a_word_find_each_other(recall: Recall) -> None:
    await recall.say(*FILLER, "Sold the Prius, it was a money pit. Got a Volvo instead", *FILLER)
    assert (await recall.texts("which car did she sell?"))[0].startswith("Sold the Prius")
    await recall.say("we bought the kids new bikes", *FILLER)
    assert (await recall.texts("what did they buy for the children?"))[0] == "we bought the kids new bikes"


async def test_a_changed_value_ranks_above_the_value_it_replaced_though_it_shares_fewer_asked_words(
    recall: Recall,
) -> None:
    await recall.say("just picked up my new Subaru Outback, the car is great", *FILLER, "ok")  # alice says both
    await recall.say("update: sold the Subaru Outback, I drive a Volvo now", *FILLER, "ok")
    texts = await recall.texts("what car does alice have?", limit=2)
    assert texts == [  # they share the old value's two words
        "update: sold the Subaru Outback, I drive a Volvo now",
        "just picked up my new Subaru Outback, the car is great",
    ]
    await recall.say("新车是卡罗拉双擎，开着很省油", *FILLER, "好")
    await recall.say("卡罗拉双擎卖掉了，车毛病太多，换了辆比亚迪汉", *FILLER, "好")
    assert await recall.texts("她开什么车？", limit=2) == [
        "卡罗拉双擎卖掉了，车毛病太多，换了辆比亚迪汉",
        "新车是卡罗拉双擎，开着很省油",
    ]


async def test_a_turn_already_shown_beside_a_better_hit_comes_after_every_other_hit(recall: Recall) -> None:
    await recall.say(*FILLER, "did you book the nightingale hotel?", "yes, the nightingale hotel for three nights")
    await recall.say(*FILLER, "the nightingale sang all night", *FILLER)
    hits = await recall.service.search("default", "nightingale hotel", EVERYWHERE, 2)
    assert "hotel" in hits[0].passage.text and hits[1].passage.text == "the nightingale sang all night"
    shown = {p.text for p in (hits[0].passage, hits[0].before, hits[0].after) if p is not None}
    assert {"did you book the nightingale hotel?", "yes, the nightingale hotel for three nights"} <= shown
    assert len(await recall.texts("nightingale hotel")) == 3  # listed again when nothing else is left
