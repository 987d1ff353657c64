"""Scoring: where an answer turn first shows among the hits (a hit shows its turn and the turns around it), and
recall@1, recall@5 and MRR per language and form."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from recall_data.model import Question

FORMS = ("asked", "keywords")
LIMIT = 5


@dataclass(frozen=True)
class Outcome:
    question: Question
    form: str  # asked | keywords
    rank: int | None  # 1-based rank of the first hit showing an answer turn, None if none of the hits does
    stale_rank: int | None = None  # same for the older value of a changed fact


def first_rank(shown: Sequence[set[int]], wanted: Iterable[int]) -> int | None:
    """`shown[i]`: the turn ids hit i+1 shows (its turn and its neighbours)."""
    targets = set(wanted)
    for i, turns in enumerate(shown):
        if turns & targets:
            return i + 1
    return None


@dataclass
class Figures:
    n: int = 0
    at1: int = 0
    at5: int = 0
    rr: float = 0.0

    def add(self, rank: int | None) -> None:
        self.n += 1
        if rank is not None:
            self.at1 += rank == 1
            self.at5 += rank <= LIMIT
            self.rr += 1 / rank

    @property
    def recall1(self) -> float:
        return self.at1 / self.n if self.n else 0.0

    @property
    def recall5(self) -> float:
        return self.at5 / self.n if self.n else 0.0

    @property
    def mrr(self) -> float:
        return self.rr / self.n if self.n else 0.0


def figures(outcomes: Iterable[Outcome], *, lang: str | None = None, form: str, kind: str | None = None) -> Figures:
    out = Figures()
    for o in outcomes:
        if o.form == form and lang in (None, o.question.lang) and kind in (None, o.question.kind):
            out.add(o.rank)
    return out


def newer_first(outcomes: Iterable[Outcome], form: str) -> tuple[int, int, int]:
    """Of the changed facts: how many show the newer value at rank 1, and above any hit showing the older one."""
    changed = [o for o in outcomes if o.form == form and o.question.kind == "changed"]
    above = sum(o.rank is not None and (o.stale_rank is None or o.rank < o.stale_rank) for o in changed)
    return sum(o.rank == 1 for o in changed), above, len(changed)


def report(outcomes: Sequence[Outcome], title: str) -> list[str]:
    lines = [f"{title}", f"  {'form':9s} {'lang':5s} {'n':>4s} {'recall@1':>9s} {'recall@5':>9s} {'MRR':>6s}"]
    for form in FORMS:
        for lang in ("zh", "en", None):
            f = figures(outcomes, lang=lang, form=form)
            name = lang or "all"
            lines.append(f"  {form:9s} {name:5s} {f.n:4d} {f.recall1:9.3f} {f.recall5:9.3f} {f.mrr:6.3f}")
    for form in FORMS:
        at1, above, n = newer_first(outcomes, form)
        lines.append(
            f"  changed facts ({form}): newer ranked first {at1}/{n} = {at1 / max(1, n):.3f}; "
            f"newer above older {above}/{n}"
        )
    return lines


def half_of(question: Question) -> str:
    """A: the even-numbered chats, B: the odd ones (tune on one half, check on the other)."""
    return "A" if int(question.conversation.rsplit("-", 1)[1]) % 2 == 0 else "B"


def halves(outcomes: Sequence[Outcome]) -> list[str]:
    """Recall@1 / recall@5 / MRR of the questions as asked, per half of the chats and language."""
    lines = ["  by half (asked): A = even-numbered chats, B = odd ones"]
    for half in ("A", "B"):
        for lang in ("zh", "en"):
            f = Figures()
            for o in outcomes:
                if o.form == "asked" and o.question.lang == lang and half_of(o.question) == half:
                    f.add(o.rank)
            lines.append(f"  {half} {lang}  {f.n:4d} {f.recall1:9.3f} {f.recall5:9.3f} {f.mrr:6.3f}")
    return lines
