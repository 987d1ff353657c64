"""Chinese segmentation for recall: CJK bigrams and characters, jieba words (rjieba), CJK bigrams, on a small chat.

Each fact is planted among ~400 everyday chat turns; each question is asked the way a person asks it. Prints
recall@1, recall@5, MRR and the index size (postings) per mode.

Run: PYTHONPATH=. .venv/bin/python bench/bench_tokenizer.py
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from agenthub.search.text import CjkMode, index_terms, query_terms
from agenthub.storage.search_index import Passage, SearchDoc, SearchScope, history_source
from agenthub.storage.search_sqlite import SqliteSearchIndex

FACTS = [
    ("我女儿下个月要去杭州读大学了，学的是计算机", "她女儿去哪个城市读大学？"),
    ("我们公司的年会定在十二月二十号，在西湖边的酒店", "年会在哪天开？"),
    ("我对花生过敏，吃了会起疹子", "我对什么东西过敏？"),
    ("老王换了新车，是一辆白色的比亚迪汉", "老王开的是什么车？"),
    ("服务器的管理员密码已经改成夜莺了", "服务器密码改成什么了？"),
    ("我家的猫叫团子，今年三岁了", "我的猫叫什么名字"),
    ("下周三要去医院复查膝盖", "什么时候去医院复查？"),
    ("项目预算批下来了，一共八十万", "项目预算是多少钱"),
    ("张伟明天来上海出差，住在静安区", "张伟住在哪个区？"),
    ("我最喜欢的电影是霸王别姬", "我最喜欢哪部电影"),
    ("新来的实习生叫李思雨，是复旦的研究生", "实习生是哪个学校的？"),
    ("发票抬头写深圳市星河科技有限公司", "发票抬头应该写什么？"),
    ("周末打算带孩子去动物园看熊猫", "周末带孩子去哪玩？"),
    ("我妈妈的生日是农历八月十五", "妈妈生日是哪天？"),
    ("这次旅行订的是去成都的高铁，早上七点出发", "去成都的高铁几点出发？"),
    ("合同里的违约金是合同金额的百分之二十", "违约金是多少"),
    ("他的微信号是 lucky_star88", "他的微信号是多少？"),
    ("健身房的私教课一共买了二十节", "私教课买了几节？"),
    ("楼下新开了一家兰州拉面，味道不错", "楼下新开了什么店"),
    ("我在学日语，准备明年考N2", "明年要考什么试？"),
    ("车位在地下二层B区一百零八号", "车位在哪里？"),
    ("报销需要财务总监签字才能走流程", "报销要谁签字？"),
    ("我们小区的快递柜在三号楼门口", "快递柜在哪？"),
    ("儿子的钢琴老师姓陈，每周六上课", "钢琴课是星期几？"),
    ("新版本v3.2定在月底上线", "新版本什么时候上线？"),
]

DISTRACTORS = [  # turns that share characters with the facts, mostly not their words
    "女儿学校的大门口在修路，读书声都听不清",
    "会议开到一半，天突然开始下雨",
    "老师说王者荣耀新出的车手皮肤很好看",
    "密码学的课程改到下周了，夜里还要赶作业",
    "团队名字叫猫头鹰，大家觉得挺可爱",
    "复查了一下代码，膝下无子的说法是小说里的",
    "算了吧，预言家说的话不能信",
    "上海的张家菜馆静悄悄的，没什么人",
    "电影院的霸王餐活动已经结束了",
    "学校里的实习机会很多，研究所也在招人",
    "票据抬头的写法各家公司不一样",
    "动物世界里的熊猫宝宝太萌了",
    "生日蛋糕上写着八月快乐",
    "高铁站的出发大厅在二楼",
    "金额大的合同都要法务看一遍",
    "星星和幸运是她最喜欢的两个词",
    "教练说健身要循序渐进",
    "面馆的拉面汤头很浓",
    "考试周大家都在图书馆",
    "地下室的B区灯坏了",
    "签字笔没水了，去财务那里拿一支",
    "快递员今天来了三次",
    "周六的琴房被别人订走了",
    "版本号的规则上个月改过一次",
    "花生米配啤酒是夜宵标配",
]
SUBJECTS = ["今天", "昨天", "明天", "刚才", "上午", "晚上", "这周", "最近"]
EVENTS = [
    "开了一个很长的会，讨论了下个季度的计划",
    "天气不太好，一直在下雨",
    "午饭吃了食堂的红烧肉",
    "地铁特别挤，差点迟到",
    "把周报写完发给领导了",
    "和同事一起去楼下喝了杯咖啡",
    "在家看了两集电视剧",
    "整理了一下电脑里的文件",
    "跟客户打了半天电话，还没谈妥",
    "帮邻居收了一个快递",
    "去超市买了点水果和牛奶",
    "代码评审提了好多意见",
    "孩子作业太多，陪着写到很晚",
    "跑步跑了五公里，有点累",
    "学习了一下新的框架文档",
]
SEEDS = 8
REPLIES = ["好的，知道了", "辛苦了", "哈哈，确实", "那挺好的", "注意休息", "嗯嗯，明白", "然后呢？", "需要帮忙吗？"]


def conversation(rng: random.Random) -> tuple[list[str], list[int]]:
    """About 400 turns with each fact at a random place; the turn number of each fact."""
    turns = [f"{rng.choice(SUBJECTS)}{rng.choice(EVENTS)}" if i % 2 == 0 else rng.choice(REPLIES) for i in range(400)]
    spots = rng.sample(range(0, 400, 2), len(FACTS) + len(DISTRACTORS))
    places = spots[: len(FACTS)]
    for (fact, _), place in zip(FACTS, places, strict=True):
        turns[place] = fact
    for distractor, place in zip(DISTRACTORS, spots[len(FACTS) :], strict=True):
        turns[place] = distractor
    return turns, places


def measure(mode: CjkMode, turns: list[str], places: list[int], directory: Path) -> list[int | None]:
    """The rank of each fact's turn for its question (None: not in the first 10)."""
    index = SqliteSearchIndex(directory / f"{mode}.sqlite3")
    source = history_source("bench:cli:zh")
    docs = [
        SearchDoc(Passage(source, n, "user", None, 1_700_000_000_000 + n * 60_000, t), tuple(index_terms(t, cjk=mode)))
        for n, t in enumerate(turns)
    ]
    index.add(source, docs, "")
    scope = SearchScope("bench:cli:zh")
    ranks: list[int | None] = []
    for (_, question), place in zip(FACTS, places, strict=True):
        hits = index.search(query_terms(question, cjk=mode), scope, 10)
        seqs = [h.passage.seq for h in hits]
        ranks.append(seqs.index(place) + 1 if place in seqs else None)
    index.close()
    return ranks


def main() -> None:
    modes: list[CjkMode] = ["grams", "words", "bigrams"]
    for mode in modes:
        ranks: list[int | None] = []
        terms = 0
        for seed in range(SEEDS):
            turns, places = conversation(random.Random(seed))
            with tempfile.TemporaryDirectory() as tmp:
                ranks += measure(mode, turns, places, Path(tmp))
            terms = sum(len(index_terms(t, cjk=mode)) for t in turns)
        r1 = sum(r == 1 for r in ranks) / len(ranks)
        r5 = sum(r is not None and r <= 5 for r in ranks) / len(ranks)
        mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)
        print(f"{mode:8s} recall@1={r1:.3f} recall@5={r5:.3f} MRR={mrr:.3f} terms={terms} ({len(ranks)} asks)")


if __name__ == "__main__":
    main()
