"""The deterministic generator: seeded two-person chats of a few hundred turns, facts planted among small talk."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from recall_data.en_facts import FACTS
from recall_data.en_facts_more import MORE_FACTS
from recall_data.en_talk import TALK, TALK_SLOTS
from recall_data.heldout_facts import EN_HELDOUT, ZH_HELDOUT
from recall_data.kinds import FactKind, fill
from recall_data.model import CONVERSATION_TURNS, T0_MS, Conversation, Lang, Question, QuestionKind, Turn
from recall_data.zh_facts import ZH_FACTS
from recall_data.zh_facts_more import ZH_MORE_FACTS
from recall_data.zh_talk import ZH_TALK, ZH_TALK_SLOTS

SEED = 2026
CONVERSATIONS_PER_LANG = 12
QUESTIONS_PER_CONVERSATION = 16
CHANGED_PER_CONVERSATION = 4
RESTATED_PER_CONVERSATION = 3
MIN_TURNS, MAX_TURNS = 220, 380
SITTING_TURNS = 25  # turns per sitting, on average
DAY_S = 86_400
NAMES: dict[Lang, list[str]] = {
    "en": ["Evan", "Maria", "Jordan", "Priya", "Tom", "Lena", "Marcus", "Chloe", "Sam", "Nadia", "Owen", "Grace"],
    "zh": ["王磊", "李婷", "陈晨", "刘洋", "张悦", "赵凯", "孙琪", "周杰", "吴迪", "郑爽", "何静", "林涛"],
}
KINDS: dict[Lang, list[FactKind]] = {"en": FACTS + MORE_FACTS, "zh": ZH_FACTS + ZH_MORE_FACTS}
HELDOUT_KINDS: dict[Lang, list[FactKind]] = {"en": EN_HELDOUT, "zh": ZH_HELDOUT}
HELDOUT_PER_LANG = 4
HELDOUT_FIRST = 50
TALKS: dict[Lang, tuple[list[str], dict[str, list[str]]]] = {"en": (TALK, TALK_SLOTS), "zh": (ZH_TALK, ZH_TALK_SLOTS)}
_OFFSET: dict[Lang, int] = {"zh": 0, "en": 100}  # conversation numbers, so every turn id is unique


@dataclass
class _Event:
    """Consecutive turns placed around `at` (a share of the conversation); `mark` names its answer turn."""

    at: float
    turns: list[tuple[int, str]]  # (speaker index, text)
    answer: int = -1  # index in `turns` of the turn holding the fact
    mark: tuple[int, str] = (-1, "")  # (fact number, "first" | "second")


def dataset(seed: int = SEED, per_lang: int = CONVERSATIONS_PER_LANG) -> list[Conversation]:
    """`per_lang` Chinese and `per_lang` English conversations; conversation n is the same whatever `per_lang`."""
    return [conversation(lang, n, seed) for lang in ("zh", "en") for n in range(per_lang)]


def heldout(seed: int = SEED, per_lang: int = HELDOUT_PER_LANG) -> list[Conversation]:
    """The held-out set: `per_lang` chats per language (numbered from 50) planting only the held-out fact kinds,
    each asked once (`heldout_facts`)."""
    return [
        conversation(lang, HELDOUT_FIRST + n, seed, every=HELDOUT_KINDS[lang])
        for lang in ("zh", "en")
        for n in range(per_lang)
    ]


def conversation(
    lang: Lang, number: int, seed: int = SEED, *, early: bool = False, every: Sequence[FactKind] | None = None
) -> Conversation:
    """With `early`, every fact is stated once, within the first quarter of the chat (the retention test).
    `every`: the fact kinds to plant (all of them, or QUESTIONS_PER_CONVERSATION of the main set's)."""
    rng = random.Random(f"{seed}:{lang}:{number}:{'early' if early else 'spread'}")
    a, b = rng.sample(NAMES[lang], 2)
    conv = Conversation(f"{lang}-{number:02d}", lang, (a, b))
    kinds = rng.sample(KINDS[lang], QUESTIONS_PER_CONVERSATION) if every is None else rng.sample(every, len(every))
    plans = _plans(rng, kinds, single=early)
    latest = 0.25 if early else 0.55
    events = [
        e
        for n, (k, plan) in enumerate(zip(kinds, plans, strict=True))
        for e in _fact_events(rng, conv, n, k, plan, latest)
    ]
    events += _distractors(rng, kinds, KINDS[lang] if every is None else every)
    marks = _lay_out(rng, conv, sorted(events, key=lambda e: e.at), rng.randint(MIN_TURNS, MAX_TURNS))
    for n, (k, plan) in enumerate(zip(kinds, plans, strict=True)):
        conv.questions.append(_question(rng, conv, n, k, plan, marks))
    return conv


@dataclass
class _Plan:
    kind: QuestionKind
    owner: int  # speaker index
    values: dict[str, str]
    new_value: str = ""


def _plans(rng: random.Random, kinds: Sequence[FactKind], *, single: bool) -> list[_Plan]:
    changeable = [i for i, k in enumerate(kinds) if k.changing and not single]
    changed = set(rng.sample(changeable, min(CHANGED_PER_CONVERSATION, len(changeable))))
    rest = [i for i in range(len(kinds)) if i not in changed and len(kinds[i].restates) + len(kinds[i].says) > 1]
    restated = set() if single else set(rng.sample(rest, RESTATED_PER_CONVERSATION))
    plans = []
    for i, k in enumerate(kinds):
        how: QuestionKind = "changed" if i in changed else "restated" if i in restated else "single"
        values = {slot: fill(rng, v) for slot, v in k.slots.items()}
        plan = _Plan(how, rng.randint(0, 1), values)
        if how == "changed":
            plan.new_value = _different(rng, k, values[k.changing])
        plans.append(plan)
    return plans


def _different(rng: random.Random, k: FactKind, old: str) -> str:
    for _ in range(50):
        new = fill(rng, k.slots[k.changing])
        if new != old:
            return new
    raise ValueError(f"{k.key}: no second value for {k.changing}")


def _fact_events(
    rng: random.Random, conv: Conversation, n: int, k: FactKind, plan: _Plan, latest: float
) -> list[_Event]:
    names = _names(conv, plan.owner)
    first = _statement(rng, k, plan, {**plan.values, **names}, rng.uniform(0.03, latest))
    first.mark = (n, "first")
    if plan.kind == "single":
        return [first]
    later = first.at + rng.uniform(0.15, 0.4)
    if plan.kind == "restated":
        said = {x for _, x in first.turns}
        again = [_format(t, {**plan.values, **names}) for t in (*k.restates, *k.says)]
        text = rng.choice([t for t in again if t not in said])
    else:
        values = {**plan.values, k.changing: plan.new_value, "was": plan.values[k.changing], **names}
        text = _format(rng.choice(k.changes), values)
    second = _Event(later, [(plan.owner, text)], 0, (n, "second"))
    _maybe_reply(rng, k, second, {**plan.values, **names}, plan.owner)
    return [first, second]


def _statement(rng: random.Random, k: FactKind, plan: _Plan, values: Mapping[str, str], at: float) -> _Event:
    other = 1 - plan.owner
    if k.leads and rng.random() < 0.3:
        ask, answer = rng.choice(k.leads)
        event = _Event(at, [(other, _format(ask, values)), (plan.owner, _format(answer, values))], 1)
    else:
        event = _Event(at, [(plan.owner, _format(rng.choice(k.says), values))], 0)
    _maybe_reply(rng, k, event, values, plan.owner)
    return event


def _maybe_reply(rng: random.Random, k: FactKind, event: _Event, values: Mapping[str, str], owner: int) -> None:
    if k.replies and rng.random() < 0.6:
        event.turns.append((1 - owner, _format(rng.choice(k.replies), values)))


def _distractors(rng: random.Random, chosen: Sequence[FactKind], every: Sequence[FactKind]) -> list[_Event]:
    """Small talk on the planted facts' topics (and a few others) that holds no fact: what a search must pass by."""
    lines = [line for k in chosen for line in rng.sample(k.distractors, min(2, len(k.distractors)))]
    others = [k for k in every if k not in chosen]
    lines += [rng.choice(k.distractors) for k in rng.sample(others, min(6, len(others))) if k.distractors]
    return [_Event(rng.random(), [(rng.randint(0, 1), line)]) for line in lines]


def _lay_out(rng: random.Random, conv: Conversation, events: list[_Event], length: int) -> dict[tuple[int, str], int]:
    """Fill `conv.turns` with small talk and the events in order; returns each marked event's answer turn id."""
    base = _OFFSET[conv.lang] * CONVERSATION_TURNS + int(conv.cid[3:]) * CONVERSATION_TURNS
    marks: dict[tuple[int, str], int] = {}
    speaker = rng.randint(0, 1)
    clock = [T0_MS // 1000 + rng.randint(0, 10 * DAY_S)]  # seconds

    def add(who: int, text: str) -> int:
        gid = base + len(conv.turns)
        clock[0] += rng.randint(6 * 3600, 3 * DAY_S) if rng.random() < 1 / SITTING_TURNS else rng.randint(15, 240)
        conv.turns.append(Turn(gid, conv.speakers[who], text, clock[0] * 1000 + base // CONVERSATION_TURNS))
        return gid

    def chat(until: int) -> int:
        who = speaker
        while len(conv.turns) < until:
            who = who if rng.random() < 0.2 else 1 - who
            for n, line in enumerate(_small_talk(rng, conv, who)):
                who = who if n == 0 else 1 - who
                add(who, _format(line, {"other": conv.speakers[1 - who]}))
        return who

    for event in events:
        speaker = chat(int(event.at * length))
        for i, (who, text) in enumerate(event.turns):
            gid = add(who, text)
            if i == event.answer and event.mark[0] >= 0:
                marks[event.mark] = gid
            speaker = who
    chat(length)
    assert len(conv.turns) < CONVERSATION_TURNS
    return marks


def _small_talk(rng: random.Random, conv: Conversation, speaker: int) -> list[str]:
    """A line of small talk, or an exchange (`a || b || ...`, the speakers taking turns); `{other}` left to fill."""
    templates, slots = TALKS[conv.lang]
    values = {slot: rng.choice(options) for slot, options in slots.items()}
    return _format(rng.choice(templates), {**values, "other": "{other}"}).split(" || ")


def _question(
    rng: random.Random, conv: Conversation, n: int, k: FactKind, plan: _Plan, marks: Mapping[tuple[int, str], int]
) -> Question:
    values = {**plan.values, **_names(conv, plan.owner)}
    first, second = marks[(n, "first")], marks.get((n, "second"))
    asks = k.asks
    if plan.kind == "changed":
        values[k.changing] = plan.new_value
        asks = k.asks_now if rng.random() < 0.6 else k.asks
    answers = (first,) if second is None else (second,) if plan.kind == "changed" else (first, second)
    stale = (first,) if plan.kind == "changed" else ()
    asked, keywords = _format(rng.choice(asks), values), _format(rng.choice(k.keywords), values)
    facts = {slot: values[slot] for slot in k.slots}
    if plan.kind == "changed":
        facts["was"] = plan.values[k.changing]
    qid = f"{conv.cid}-q{n:02d}"
    return Question(qid, conv.cid, conv.lang, plan.kind, k.key, asked, keywords, answers, stale, facts)


def _names(conv: Conversation, owner: int) -> dict[str, str]:
    return {"name": conv.speakers[owner], "other": conv.speakers[1 - owner]}


def _format(template: str, values: Mapping[str, str]) -> str:
    return template.format_map(dict(values))
