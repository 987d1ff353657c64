"""The long set: six two-person chats of 300+ turns over twelve dated sessions (four English, two Chinese), their
hand-written facts stated in passing among varied small talk, 26 questions each. Half is held out: the Chinese
chat 1 and the English chats 2 and 3 (`HELDOUT`), reported apart and never looked at miss by miss."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from types import ModuleType

from recall_data import long_filler_en, long_filler_zh
from recall_data.long_en_heldout import BEA_WES, IRENE_MATEO
from recall_data.long_en_tuned import HANNAH_KOFI, ROSA_DANIEL
from recall_data.long_filler_more import EN_LINES, ZH_LINES
from recall_data.long_kinds import F
from recall_data.long_zh import GAO_SU, XU_TANG
from recall_data.model import CONVERSATION_TURNS, Conversation, Lang, Question, Turn

SEED = 2027
FIRST = 200
"""Conversation numbers from here: every turn id and timestamp of the long set is its own."""
SESSIONS = 12
SESSION_TURNS = (26, 32)
START_S = 1_772_400_000  # 2026-03-01 (UTC)
DAY_S = 86_400
Chat = tuple[tuple[str, str], list[F]]
CHATS: list[tuple[Lang, Chat]] = [
    ("en", ROSA_DANIEL),
    ("en", HANNAH_KOFI),
    ("en", IRENE_MATEO),
    ("en", BEA_WES),
    ("zh", XU_TANG),
    ("zh", GAO_SU),
]
HELDOUT = frozenset({"long-en-2", "long-en-3", "long-zh-1"})
MORE = {True: EN_LINES, False: ZH_LINES}
_ZH_ENDS = ("。", "！", "？", "~", "…", "，", "）")
FILLER: dict[Lang, ModuleType] = {"en": long_filler_en, "zh": long_filler_zh}


def long_set(seed: int = SEED, part: str = "all", *, wordy: bool = False) -> list[Conversation]:
    """`part`: all, tuned (the half that may be looked at) or heldout. `wordy`: every turn a short paragraph (two
    to five lines, a fact always between two), so that five hits and their neighbours press on the budget."""
    chats = []
    counts: dict[str, int] = {}
    for number, (lang, chat) in enumerate(CHATS):
        cid = f"long-{lang}-{counts.setdefault(lang, 0)}"
        counts[lang] += 1
        if part == "all" or (cid in HELDOUT) == (part == "heldout"):
            chats.append(conversation(cid, lang, FIRST + number, chat, seed, wordy=wordy))
    return chats


class _Filler:
    """Small talk dealt from a shuffled deck (every line once before any comes again), some lines with an opener
    or a tail."""

    def __init__(self, rng: random.Random, lang: Lang, *, wordy: bool = False) -> None:
        self.rng, self.module, self.deck, self.wordy = rng, FILLER[lang], list[str](), wordy
        self.space = " " if lang == "en" else ""

    def turn(self) -> str:
        """A turn of small talk: one to three lines (chat turns run from a phrase to a short paragraph)."""
        count = self.rng.randint(2, 5) if self.wordy else self.rng.choices((1, 2, 3), weights=(45, 40, 15))[0]
        return self.join(self.line() for _ in range(count))

    def around(self, fact: str) -> str:
        """A fact said in passing: half the time with a line of small talk before or after it."""
        roll = self.rng.random()
        if self.wordy:
            return self.join((self.line(), fact, self.line()))
        if roll < 0.25:
            return self.join((self.line(), fact))
        if roll < 0.5:
            return self.join((fact, self.line()))
        return fact

    def join(self, pieces: Iterable[str]) -> str:
        """Lines of one turn: English ones after a space, Chinese ones after a full stop where one lacks an end."""
        if self.space:
            return " ".join(pieces)
        return "".join(p if p.endswith(_ZH_ENDS) else p + "。" for p in pieces).removesuffix("。")

    def line(self) -> str:
        if not self.deck:
            self.deck = list(self.module.LINES) + list(MORE[self.space == " "])
            self.rng.shuffle(self.deck)
        text: str = self.deck.pop()
        if self.rng.random() < 0.2:
            opener = self.rng.choice(self.module.OPENERS)
            keep = not self.space or text.startswith(("I ", "I'"))
            text = opener + (text if keep else text[0].lower() + text[1:])
        if self.rng.random() < 0.15:
            tail = self.rng.choice(self.module.TAILS).strip()
            text += " " + tail if self.space else ("" if text.endswith(_ZH_ENDS) else "，") + tail
        return text


def conversation(cid: str, lang: Lang, number: int, chat: Chat, seed: int, *, wordy: bool = False) -> Conversation:
    (a, b), facts = chat
    rng = random.Random(f"{seed}:{cid}")
    conv = Conversation(cid, lang, (a, b))
    filler = _Filler(rng, lang, wordy=wordy)
    base = number * CONVERSATION_TURNS
    day = START_S + rng.randint(0, 6) * DAY_S
    answers: dict[int, int] = {}
    olds: dict[int, int] = {}
    for session in range(SESSIONS):
        day += rng.randint(3, 12) * DAY_S
        clock = day + rng.randint(17, 21) * 3600 + rng.randint(0, 3599)
        events = _events(facts, session)
        length = rng.randint(*SESSION_TURNS)
        slots = sorted(rng.sample(range(2, length - 2), len(events)))
        who = rng.randint(0, 1)
        plan: list[tuple[int, str, tuple[str, int] | None]] = [(who, _fill(filler.module.GREETINGS, rng), None)]
        for at, (tag, index, turns) in zip(slots, events, strict=True):
            while len(plan) < at:
                who = who if rng.random() < 0.15 else 1 - who
                plan.append((who, filler.turn(), None))
            for i, (speaker, text) in enumerate(turns):
                last = i == len(turns) - 1
                plan.append((speaker, filler.around(text) if last else text, (tag, index) if last else None))
                who = speaker
        while len(plan) < length - 1:
            who = 1 - who
            plan.append((who, filler.turn(), None))
        plan.append((1 - who, _fill(filler.module.FAREWELLS, rng), None))
        for speaker, text, mark in plan:
            gid = base + len(conv.turns)
            clock += rng.randint(25, 200)
            said = text.format(other=conv.speakers[1 - speaker])
            conv.turns.append(Turn(gid, conv.speakers[speaker], said, clock * 1000 + number))
            if mark is not None:
                (answers if mark[0] == "fact" else olds)[mark[1]] = gid
    assert len(conv.turns) < CONVERSATION_TURNS
    conv.questions = [_question(conv, n, f, answers[n], olds.get(n)) for n, f in enumerate(facts)]
    return conv


def _fill(lines: Sequence[str], rng: random.Random) -> str:
    return rng.choice(list(lines))


def _events(facts: Sequence[F], session: int) -> list[tuple[str, int, list[tuple[int, str]]]]:
    """The fact turns of this session (a leading question first where there is one), and older values of
    changed facts stated in it."""
    out: list[tuple[str, int, list[tuple[int, str]]]] = []
    for n, f in enumerate(facts):
        if f.session == session:
            out.append(("fact", n, [*([(1 - f.who, f.lead)] if f.lead else []), (f.who, f.text)]))
        if f.old[0] == session:
            out.append(("old", n, [(f.who, f.old[1])]))
    return out


def _question(conv: Conversation, n: int, f: F, answer: int, old: int | None) -> Question:
    said = next(t.text for t in conv.turns if t.gid == answer)
    if f.needle not in said:
        raise ValueError(f"{conv.cid} fact {n}: needle {f.needle!r} not in {said!r}")
    stale = (old,) if old is not None else ()
    values = {"needle": f.needle}
    return Question(f"{conv.cid}-q{n:02d}", conv.cid, conv.lang, f.kind, f.kind, f.ask, f.ask, (answer,), stale, values)
