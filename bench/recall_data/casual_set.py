"""The casual set, held out from all tuning: four two-person chats (two English, two Chinese) of 22 dated sessions
each, casual small talk around hand-written facts, in the manner of public long-conversation memory benchmarks.
Questions: single facts, multi-hop across sessions (every evidence turn must show), when (with the date), what
happened after an event, preferences, changed facts (the newest answers) and paraphrases. Its misses are never
printed; it is reported as the generalisation figure only."""

from __future__ import annotations

import random
from collections.abc import Sequence

from recall_data import casual_filler as filler
from recall_data.casual_en import NORA_FELIX, PRIYA_TOM
from recall_data.casual_en_fresh import GRACE_OWEN, MARCUS_LEILA
from recall_data.casual_kinds import Chat, Q, S
from recall_data.casual_zh import HE_MA, LIN_ZHOU
from recall_data.model import CONVERSATION_TURNS, Conversation, Lang, Question, Turn
from recall_data.weeks_dev import AMEI_XIAOYU, ROSA_BEN
from recall_data.weeks_en import DANA_KOFI, HARRIET_JOEL
from recall_data.weeks_zh import DAPENG_SISI, XIAOWEN_AJIE

SEED = 4242
FIRST = 300
"""Conversation numbers from here: every turn id and timestamp of the casual set is its own."""
SESSIONS = 22
SESSION_TURNS = (14, 22)
START_S = 1_767_571_200  # 2026-01-05 (UTC)
DAY_S = 86_400
CHATS: list[tuple[Lang, Chat]] = [("en", NORA_FELIX), ("en", PRIYA_TOM), ("zh", LIN_ZHOU), ("zh", HE_MA)]
FRESH_FIRST = 310
FRESH_CHATS: list[tuple[Lang, Chat]] = [("en", MARCUS_LEILA), ("en", GRACE_OWEN)]
"""The fresh set: two more English chats written before the s6 recall work and never tuned on."""
WEEKS_FIRST = 320
WEEKS_CHATS: list[tuple[Lang, Chat]] = [
    ("en", DANA_KOFI),
    ("en", HARRIET_JOEL),
    ("zh", XIAOWEN_AJIE),
    ("zh", DAPENG_SISI),
]
"""The weeks set: two English and two Chinese chats written for the s7 recall work before any change to the
search, never tuned on (totals only, never a miss)."""
WEEKS_DEV_FIRST = 330
WEEKS_DEV_CHATS: list[tuple[Lang, Chat]] = [("en", ROSA_BEN), ("zh", AMEI_XIAOYU)]
"""The weeks dev set: made as the weeks set, its misses shown and tuned on."""


def time_dev_set(seed: int = SEED) -> list[Conversation]:
    """The time dev chats (`time_dev`): questions asked by when a thing was said; tune on these."""
    from recall_data.time_dev import TIME_DEV_CHATS, TIME_DEV_FIRST, dated_questions

    return [dated_questions(c) for c in _chats(TIME_DEV_CHATS, "timedev", TIME_DEV_FIRST, seed)]


def para_dev_set(seed: int = SEED) -> list[Conversation]:
    """The paraphrase dev chats (`para_dev`): asked as public long-conversation benchmarks ask; tune on these."""
    from recall_data.para_dev import PARA_DEV_CHATS, PARA_DEV_FIRST

    return _chats(PARA_DEV_CHATS, "paradev", PARA_DEV_FIRST, seed)


def casual_set(seed: int = SEED) -> list[Conversation]:
    return _chats(CHATS, "casual", FIRST, seed)


def fresh_set(seed: int = SEED) -> list[Conversation]:
    """The fresh held-out English chats (`casual_en_fresh`), made as the casual set's are."""
    return _chats(FRESH_CHATS, "casual-fresh", FRESH_FIRST, seed)


def weeks_set(seed: int = SEED) -> list[Conversation]:
    """The weeks held-out chats (`weeks_en`, `weeks_zh`), made as the casual set's are."""
    return _chats(WEEKS_CHATS, "weeks", WEEKS_FIRST, seed)


def weeks_dev_set(seed: int = SEED) -> list[Conversation]:
    """The weeks dev chats (`weeks_dev`): tune on these, never on the weeks set."""
    return _chats(WEEKS_DEV_CHATS, "weeksdev", WEEKS_DEV_FIRST, seed)


def _chats(chats: list[tuple[Lang, Chat]], prefix: str, first: int, seed: int) -> list[Conversation]:
    counts: dict[str, int] = {}
    out = []
    for number, (lang, chat) in enumerate(chats):
        cid = f"{prefix}-{lang}-{counts.setdefault(lang, 0)}"
        counts[lang] += 1
        out.append(conversation(cid, lang, first + number, chat, seed))
    return out


class _Talk:
    """Turns of small talk put together from pieces: an opener, one or two remarks, sometimes a question back."""

    def __init__(self, rng: random.Random, lang: Lang) -> None:
        self.rng, self.lang = rng, lang
        en = lang == "en"
        self.openers = filler.EN_OPENERS if en else filler.ZH_OPENERS
        self.remarks = filler.EN_REMARKS if en else filler.ZH_REMARKS
        self.questions = filler.EN_QUESTIONS if en else filler.ZH_QUESTIONS
        self.greetings = filler.EN_GREETINGS if en else filler.ZH_GREETINGS
        self.farewells = filler.EN_FAREWELLS if en else filler.ZH_FAREWELLS
        self.deck: list[str] = []

    def remark(self) -> str:
        if not self.deck:
            self.deck = list(self.remarks)
            self.rng.shuffle(self.deck)
        return self.deck.pop()

    def turn(self) -> str:
        pieces = []
        if self.rng.random() < 0.35:
            pieces.append(self.rng.choice(self.openers))
        pieces.append(self.remark())
        if self.rng.random() < 0.3:
            pieces.append(self.remark())
        if self.rng.random() < 0.25:
            pieces.append(self.rng.choice(self.questions))
        return self.join(pieces)

    def around(self, fact: str) -> str:
        """A fact said in passing: sometimes after an opener, sometimes followed by a remark or a question."""
        pieces = [fact]
        if self.rng.random() < 0.3:
            pieces.insert(0, self.rng.choice(self.openers))
        roll = self.rng.random()
        if roll < 0.3:
            pieces.append(self.remark())
        elif roll < 0.5:
            pieces.append(self.rng.choice(self.questions))
        return self.join(pieces)

    def join(self, pieces: Sequence[str]) -> str:
        if self.lang == "en":
            return " ".join(pieces)
        ends = ("。", "！", "？", "～", "…")
        return "".join(p if p.endswith(ends) else p + ("，" if p in self.openers else "。") for p in pieces)


def conversation(cid: str, lang: Lang, number: int, chat: Chat, seed: int) -> Conversation:
    (a, b), said, asks = chat
    rng = random.Random(f"{seed}:{cid}")
    conv = Conversation(cid, lang, (a, b))
    talk = _Talk(rng, lang)
    tags: dict[str, int] = {}
    day = START_S + rng.randint(0, 5) * DAY_S
    for session in range(SESSIONS):
        day += rng.randint(5, 14) * DAY_S
        clock = day + rng.randint(9, 21) * 3600 + rng.randint(0, 3599)
        facts = [s for s in said if s.session == session]
        length = rng.randint(*SESSION_TURNS)
        slots = sorted(rng.sample(range(2, length - 2), len(facts)))
        who = rng.randint(0, 1)
        plan: list[tuple[int, str, S | None]] = [(who, rng.choice(talk.greetings), None)]
        for at, fact in zip(slots, facts, strict=True):
            while len(plan) < at:
                who = who if rng.random() < 0.2 else 1 - who
                plan.append((who, talk.turn(), None))
            plan.append((fact.who, talk.around(fact.text), fact))
            who = fact.who
        while len(plan) < length - 1:
            who = 1 - who
            plan.append((who, talk.turn(), None))
        plan.append((1 - who, rng.choice(talk.farewells), None))
        for speaker, text, mark in plan:
            gid = number * CONVERSATION_TURNS + len(conv.turns)
            clock += rng.randint(30, 180)
            conv.turns.append(
                Turn(gid, conv.speakers[speaker], text.format(other=conv.speakers[1 - speaker]), clock * 1000 + number)
            )
            if mark is not None:
                tags[mark.tag] = gid
    assert len(conv.turns) < CONVERSATION_TURNS
    conv.questions = [_question(conv, n, q, tags) for n, q in enumerate(asks)]
    return conv


def _question(conv: Conversation, n: int, q: Q, tags: dict[str, int]) -> Question:
    texts = {t.gid: t.text.lower() for t in conv.turns}
    for tag, needle in q.evidence:
        if needle not in texts[tags[tag]]:
            raise ValueError(f"{conv.cid} question {n}: needle {needle!r} not in {texts[tags[tag]]!r}")
    values = {f"needle{i}" if i else "needle": needle for i, (_, needle) in enumerate(q.evidence)}
    answers = tuple(tags[tag] for tag, _ in q.evidence)
    stale = tuple(tags[tag] for tag in q.stale)
    return Question(f"{conv.cid}-q{n:02d}", conv.cid, conv.lang, q.kind, q.kind, q.ask, q.ask, answers, stale, values)
