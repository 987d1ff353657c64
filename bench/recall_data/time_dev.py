"""The time dev set: one English and one Chinese chat made as the casual set's, each coming back to the same topics
session after session, asked about them by when they were said ("what did Mia say about her garden last week?",
"老陈第一次说腰疼是什么时候？", "朵朵最近怎么了？"). A question's `{when}` is filled with how the answer turn's day
reads from the chat's last turn (today, yesterday, 3 days ago, last week, two weeks ago, last month, in March; 今天,
昨天, 三天前, 上周, 两周前, 上个月, 三月). And a few whose time words are the event's, said in the turn itself
("what did Jonah pick up on Saturday?" / "On Saturday I went to the flea market…"), not a window from the chat's
end. Written for the s9 recall work; its misses may be shown and tuned on."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from recall_data.casual_kinds import Chat, Q, S
from recall_data.model import Conversation, Lang, Question

# fmt: off
MIA_JONAH: Chat = (
    ("Mia", "Jonah"),
    [
        S(1, 0, "Work is quiet, I'm reorganising the library archive at the museum.", "m_work"),
        S(2, 1, "I signed up for a 10k run in the park, my first race ever.", "j_run0"),
        S(3, 0, "My garden is finally planted, tomatoes and beans along the fence.", "m_garden0"),
        S(5, 0, "My sister Ida is moving back from Spain next month.", "m_ida0"),
        S(6, 1, "My old car failed its inspection, the brakes are shot.", "j_car0"),
        S(4, 1, "Next month I'm off to Lisbon for my cousin's wedding, I need a suit.", "j_lisbon"),
        S(7, 1, "On Saturday I went to the flea market and came home with a brass lamp.", "j_flea"),
        S(11, 0, "Last weekend we drove to the coast and ate chips in the rain.", "m_coast"),
        S(15, 1, "Yesterday the neighbour's dog got into our kitchen and stole a whole chicken.", "j_dog"),
        S(8, 1, "Did the 10k run, finished in 58 minutes, legs like jelly.", "j_run1"),
        S(9, 0, "My boss at the museum asked me to curate the autumn exhibition.", "m_work1"),
        S(10, 0, "Slugs got into the garden and ate half the lettuce overnight.", "m_garden1"),
        S(12, 0, "Ida found a flat two streets from me, we're neighbours again.", "m_ida1"),
        S(13, 1, "Bought a used car, a grey estate with a dodgy radio.", "j_car1"),
        S(14, 1, "Started training for a half marathon, running four mornings a week.", "j_run2"),
        S(16, 0, "Picked the first tomatoes from the garden, tiny but sweet.", "m_garden2"),
        S(17, 0, "The exhibition opened at the museum, about two hundred people came.", "m_work2"),
        S(18, 0, "Ida and I had a massive argument about mum's birthday plans.", "m_ida2"),
        S(19, 1, "Pulled a calf muscle on a long run, no running for a while.", "j_run3"),
        S(20, 0, "I'm digging a pond at the end of the garden for the frogs.", "m_garden3"),
        S(21, 1, "The estate car's radio finally died, total silence on the motorway.", "j_car2"),
    ],
    [
        Q("What did Mia say about her garden {when}?", "single", (("m_garden2", "first tomatoes"),)),
        Q("What did Mia tell me about the garden {when}?", "single", (("m_garden3", "digging a pond"),)),
        Q("How was Jonah's running going {when}?", "single", (("j_run2", "half marathon"),)),
        Q("What happened to Jonah's running {when}?", "single", (("j_run3", "pulled a calf muscle"),)),
        Q("When did Jonah first mention a race?", "when", (("j_run0", "signed up for a 10k"),)),
        Q("What was the first thing Mia said about her garden?", "single", (("m_garden0", "tomatoes and beans"),)),
        Q("What's the latest news about Ida?", "single", (("m_ida2", "massive argument"),)),
        Q("What did Jonah say about his car {when}?", "single", (("j_car1", "grey estate"),)),
        Q("What did Jonah say about the car {when}?", "single", (("j_car2", "radio finally died"),)),
        Q("What did Mia say about the museum {when}?", "single", (("m_work1", "curate the autumn exhibition"),)),
        Q("What did Mia most recently say about her garden?", "single", (("m_garden3", "digging a pond"),)),
        Q("When did Mia first talk about her sister?", "when", (("m_ida0", "moving back from spain"),)),
        Q("What did Mia say about the exhibition {when}?", "single", (("m_work2", "two hundred people"),)),
        Q("What did Mia say about Ida {when}?", "single", (("m_ida1", "two streets from me"),)),
        Q("What did Jonah pick up on Saturday?", "single", (("j_flea", "brass lamp"),)),
        Q("Where did Mia go last weekend?", "single", (("m_coast", "drove to the coast"),)),
        Q("What did the neighbour's dog do yesterday?", "single", (("j_dog", "stole a whole chicken"),)),
        Q("Whose wedding is Jonah going to?", "single", (("j_lisbon", "cousin's wedding"),)),
    ],
)

XIAOYU_LAOCHEN: Chat = (
    ("小雨", "老陈"),
    [
        S(1, 0, "我在银行做柜员，每天数钱数到手软", "y_work0"),
        S(2, 0, "新房开始装修了，先砸墙再改水电", "y_reno0"),
        S(3, 1, "周末跟老同学去水库钓鱼，钓了三条鲫鱼", "c_fish0"),
        S(4, 0, "朵朵上幼儿园了，第一天哭了一上午", "y_kid0"),
        S(6, 1, "腰疼得厉害，医生说是腰肌劳损", "c_back0"),
        S(7, 0, "周六带朵朵去动物园，她看到长颈鹿激动坏了", "y_zoo"),
        S(13, 1, "上周末去喝了老同学的喜酒，喝得有点多", "c_wedding"),
        S(16, 0, "昨天在地铁上钱包被偷了，身份证也在里面", "y_wallet"),
        S(9, 0, "装修队把厨房瓷砖贴歪了，返工了两次", "y_reno1"),
        S(10, 1, "钓鱼的时候手机掉水里了，捞了半天没捞着", "c_fish1"),
        S(11, 0, "银行调我去做理财经理了，还得考证", "y_work1"),
        S(12, 0, "朵朵在幼儿园得了小红花，回家得意得不行", "y_kid1"),
        S(14, 1, "去做了推拿，腰好多了", "c_back1"),
        S(15, 0, "装修终于完工了，就等散味入住", "y_reno2"),
        S(17, 1, "买了根新鱼竿，碳素的，花了八百", "c_fish2"),
        S(18, 0, "理财证考过了，请同事吃了顿烤肉", "y_work2"),
        S(19, 0, "朵朵发烧三十九度，我请假在家陪她", "y_kid2"),
        S(20, 0, "搬进新房第一晚，楼上装修电钻响到十点", "y_reno3"),
        S(21, 1, "腰又闪了一下，搬个箱子就不行了", "c_back2"),
    ],
    [
        Q("小雨{when}说装修怎么了？", "single", (("y_reno2", "装修终于完工"),)),
        Q("老陈{when}钓鱼出了什么事？", "single", (("c_fish1", "手机掉水里"),)),
        Q("老陈第一次说腰疼是什么时候？", "when", (("c_back0", "腰肌劳损"),)),
        Q("朵朵最近怎么了？", "single", (("y_kid2", "发烧三十九度"),)),
        Q("小雨{when}说工作上有什么变化？", "single", (("y_work1", "理财经理"),)),
        Q("老陈最近一次提到腰是怎么回事？", "single", (("c_back2", "腰又闪了一下"),)),
        Q("小雨第一次提装修是什么时候？", "when", (("y_reno0", "先砸墙再改水电"),)),
        Q("老陈{when}买了什么？", "single", (("c_fish2", "新鱼竿"),)),
        Q("朵朵{when}怎么了？", "single", (("y_kid1", "小红花"),)),
        Q("小雨{when}说了什么考试的事？", "single", (("y_work2", "理财证考过了"),)),
        Q("小雨{when}说新房怎么样？", "single", (("y_reno3", "楼上装修电钻"),)),
        Q("老陈{when}说腰怎么样了？", "single", (("c_back1", "腰好多了"),)),
        Q("小雨周六带朵朵去哪儿玩了？", "single", (("y_zoo", "动物园"),)),
        Q("老陈上周末去干什么了？", "single", (("c_wedding", "老同学的喜酒"),)),
        Q("小雨昨天丢了什么东西？", "single", (("y_wallet", "钱包被偷了"),)),
    ],
)
# fmt: on

TIME_DEV_FIRST = 340
TIME_DEV_CHATS: list[tuple[Lang, Chat]] = [("en", MIA_JONAH), ("zh", XIAOYU_LAOCHEN)]
_ZH_NUMBERS = "零一两三四五六七八九十"
_EN_NUMBERS = ("zero", "one", "two", "three", "four", "five", "six")


def relative_day(lang: Lang, said_ms: int, now_ms: int) -> str:
    """How a person says, at `now_ms`, the day of `said_ms` (local time)."""
    said, now = _day(said_ms), _day(now_ms)
    days = (now - said).days
    months = (now.year - said.year) * 12 + now.month - said.month
    en = lang == "en"
    if days == 0:
        return "today" if en else "今天"
    if days == 1:
        return "yesterday" if en else "昨天"
    if days < 7:
        return f"{days} days ago" if en else f"{_ZH_NUMBERS[days]}天前"
    if days <= 10:
        return "last week" if en else "上周"
    if days <= 24:
        weeks = round(days / 7)
        return f"{_EN_NUMBERS[weeks]} weeks ago" if en else f"{_ZH_NUMBERS[weeks]}周前"
    if months == 1:
        return "last month" if en else "上个月"
    return f"in {said.strftime('%B')}" if en else f"{said.month}月"


def _day(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).date()  # the searcher's default zone


def dated_questions(conv: Conversation) -> Conversation:
    """`conv` with each question's `{when}` filled from its first answer turn's day, seen from the chat's end."""
    now = conv.turns[-1].timestamp
    said = {t.gid: t.timestamp for t in conv.turns}

    def fill(q: Question) -> Question:
        if "{when}" not in q.asked:
            return q
        asked = q.asked.replace("{when}", relative_day(conv.lang, said[q.answers[0]], now))
        return replace(q, asked=asked, keywords=asked)

    conv.questions = [fill(q) for q in conv.questions]
    return conv
