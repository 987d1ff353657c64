"""Memory recall benchmark: the team's own long Chinese and English chats stored through the product's store, every
question asked of `memory_search`'s search as a person asks it and as keywords; recall@1, recall@5, MRR, and whether
a changed fact's newer value ranks first. Then retention: facts planted early, five L2 compactions and an
AutoCompact sweep later, still found.

Run: .venv/bin/python bench/bench_recall.py [--conversations 12] [--set main|heldout|long|casual|fresh|weeks|...]
[--no-rerank]
[--no-time] [--cjk words|bigrams] [--scope chat|agent] [--backend files|postgres] [--show-misses N [--misses-beyond K]]
[--no-retention] [--show-text-misses N] [--wordy]
[--dump data.json]
`--set heldout`: 8 chats on other topics, asked in other words, kept out of tuning (recall_data/heldout_facts.py).
`--set long`: 6 chats of 300+ turns over 12 dated sessions, hand-written facts (recall_data/long_set.py), reported as
its tuned half and its held-out half (the held-out half's misses are never shown).
`--set casual`: 4 chats of 22 dated sessions, ~390 turns each, written after the tuning and never tuned on
(recall_data/casual_set.py): totals only, per language and question kind, never a miss.
`--set fresh`: 2 more English chats made as the casual set's, written before the s6 recall work and never tuned on
(recall_data/casual_en_fresh.py): totals only, never a miss.
`--set weeks`: 4 more chats (2 en, 2 zh, 96 questions) made as the casual set's, written for the s7 recall work and
measured before any change, never tuned on (recall_data/weeks_en.py, weeks_zh.py): totals only, never a miss.
`--set weeksdev`: 2 chats made the same way to tune on (recall_data/weeks_dev.py): misses shown.
`--set timedev`: 2 chats made the same way, asked by when things were said ("last week", "第一次", "最近"), to tune
the time-aware recall on (recall_data/time_dev.py): misses shown.
`--set paradev`: 4 chats (2 en, 2 zh) made the same way, asked as public long-conversation benchmarks ask (a kind by
its member, activities over sessions, when, changed facts), to tune the s10 recall work on (recall_data/para_dev.py):
misses shown.
Every set is also counted as the public long-conversation benchmark counts: the real memory_search tool's text
answer (limit 5) cut at 3,500 characters must hold the answer turn's distinctive part (recall_data/budget.py).
The main set's figures are also given per half (A: even-numbered chats, B: odd ones): tune on one, check the other.
(retention runs on the files: it idles a chat by its file time, as AutoCompact reads it there)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recall_data.budget import TextOutcome, needles, text_report
from recall_data.casual_set import casual_set, fresh_set, para_dev_set, time_dev_set, weeks_dev_set, weeks_set
from recall_data.generate import CONVERSATIONS_PER_LANG, HELDOUT_PER_LANG, dataset, heldout
from recall_data.long_set import HELDOUT, long_set
from recall_data.model import Conversation, as_json
from recall_data.probe import RankedProbe
from recall_data.retention import describe, measure_retention
from recall_data.run import ProbeOf, measure_both
from recall_data.score import Outcome, halves, report

from agenthub.log import configure_logging
from agenthub.search import rerank, text
from tests.support.postgres import new_server


def misses(conversations: list[Conversation], outcomes: list[Outcome], count: int, beyond: int = 1) -> list[str]:
    """The first `count` questions (as asked) whose answer is not among the first `beyond` hits, with the answer's
    turn."""
    turns = {t.gid: t for c in conversations for t in c.turns}
    lines = []
    for o in [o for o in outcomes if o.form == "asked" and (o.rank is None or o.rank > beyond)][:count]:
        q, answer = o.question, turns[o.question.answers[0]]
        lines.append(f"  miss {q.qid} [{q.kind}] rank={o.rank}: {q.asked}  <- {answer.speaker}: {answer.text}")
    return lines


def _held_out(cid: str) -> bool:
    """A chat whose misses are never shown: the long set's held-out half, the whole casual set."""
    return cid in HELDOUT or cid.startswith(("casual-", "weeks-"))


def text_report_by_kind(texts: list[TextOutcome]) -> list[str]:
    """The casual set's answer-within-3,500 figure per question kind (totals only, never a question)."""
    lines = ["  by kind: found within 3,500 characters"]
    for kind in sorted({o.question.kind for o in texts}):
        chosen = [o for o in texts if o.question.kind == kind]
        lines.append(f"  {kind:8s} {sum(o.found for o in chosen):3d}/{len(chosen):3d}")
    return lines


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, help="per language (main 12, heldout 4)")
    parser.add_argument(
        "--set",
        choices=["main", "heldout", "long", "casual", "fresh", "weeks", "weeksdev", "timedev", "paradev"],
        default="main",
        help="which data set",
    )
    parser.add_argument("--no-rerank", action="store_true", help="the index's order, without the second stage")
    parser.add_argument("--no-time", action="store_true", help="no time-aware stage (time words searched as words)")
    parser.add_argument(
        "--cjk", choices=["grams", "words", "bigrams"], default=text.CJK_MODE, help="how Chinese is cut"
    )
    parser.add_argument("--scope", choices=["chat", "agent"], default="chat", help="agent: search every chat")
    parser.add_argument("--show-misses", type=int, default=0, metavar="N")
    parser.add_argument("--misses-beyond", type=int, default=1, metavar="K", help="a miss: not among the first K hits")
    parser.add_argument("--wordy", action="store_true", help="long set: every turn a short paragraph")
    parser.add_argument("--show-text-misses", type=int, default=0, metavar="N", help="not in the tool's 3,500 chars")
    parser.add_argument("--no-retention", action="store_true")
    parser.add_argument("--dump", type=Path, metavar="FILE", help="also write the data set to FILE as JSON")
    parser.add_argument(
        "--backend", choices=["files", "postgres"], default="files", help="postgres: a throw-away server of its own"
    )
    return parser.parse_args()


def text_misses(conversations: list[Conversation], outcomes: list[TextOutcome], count: int) -> list[str]:
    """The first `count` questions whose answer is not within the tool's budget (never one of a held-out chat)."""
    by_id = {c.cid: c for c in conversations}
    lines = []
    for o in [o for o in outcomes if not o.found and not _held_out(o.question.conversation)][:count]:
        q = o.question
        lines.append(
            f"  text miss {q.qid} [{q.kind}] anywhere={o.anywhere}: {q.asked}  <- {needles(by_id[q.conversation], q)}"
        )
    return lines


async def run(
    conversations: list[Conversation], backend: str, probe_of: ProbeOf
) -> tuple[list[Outcome], list[TextOutcome]]:
    """The measurement in a fresh deployment: files in a temporary directory, or a new PostgreSQL server."""
    with tempfile.TemporaryDirectory() as tmp:
        if backend == "files":
            return await measure_both(conversations, Path(tmp), probe_of)
        server = new_server()
        try:
            return await measure_both(conversations, Path(tmp), probe_of, dsn=server.create_database())
        finally:
            server.remove()


async def main() -> int:
    args = arguments()
    text.CJK_MODE = args.cjk
    rerank.ENABLED = not args.no_rerank
    rerank.TIME_AWARE = not args.no_time
    if args.set == "main":
        conversations = dataset(per_lang=args.conversations or CONVERSATIONS_PER_LANG)
    elif args.set == "heldout":
        conversations = heldout(per_lang=args.conversations or HELDOUT_PER_LANG)
    elif args.set == "long":
        conversations = long_set(wordy=args.wordy)
    elif args.set == "fresh":
        conversations = fresh_set()
    elif args.set == "weeks":
        conversations = weeks_set()
    elif args.set == "weeksdev":
        conversations = weeks_dev_set()
    elif args.set == "timedev":
        conversations = time_dev_set()
    elif args.set == "paradev":
        conversations = para_dev_set()
    else:
        conversations = casual_set()
    if args.dump is not None:
        args.dump.write_text(json.dumps(as_json(conversations), ensure_ascii=False, indent=1), encoding="utf-8")
    turns = sum(len(c.turns) for c in conversations)
    questions = sum(len(c.questions) for c in conversations)
    print(f"data: {len(conversations)} conversations, {turns} turns, {questions} questions")
    everywhere = args.scope == "agent"
    started = time.perf_counter()
    outcomes, texts = await run(conversations, args.backend, partial(RankedProbe, everywhere=everywhere))
    elapsed = time.perf_counter() - started
    stage = "index order" if args.no_rerank else "reranked"
    title = (
        f"memory_search on {args.backend}, {args.set} set, Chinese as {args.cjk}, {stage}, scope {args.scope} "
        f"({elapsed:.1f} s)"
    )
    print("\n".join(report(outcomes, title)))
    if args.set == "main":
        print("\n".join(halves(outcomes)))
    print("\n".join(text_report(texts, "the tool's text answer, cut at 3,500 characters: answer found")))
    if args.set == "long":
        for part, name in ((False, "tuned half"), (True, "held-out half")):
            chosen = [o for o in texts if (o.question.conversation in HELDOUT) == part]
            print("\n".join(text_report(chosen, f"  {name}: answer within 3,500 characters")))
    if args.set in ("casual", "fresh", "weeks", "weeksdev", "timedev", "paradev"):
        print("\n".join(text_report_by_kind(texts)))
    outcomes_shown = [o for o in outcomes if not _held_out(o.question.conversation)]
    print("\n".join(misses(conversations, outcomes_shown, args.show_misses, args.misses_beyond)))
    print("\n".join(text_misses(conversations, texts, args.show_text_misses)))
    if not args.no_retention:
        print(describe(await measure_retention(lambda gw: RankedProbe(gw.search))))
    return 0


if __name__ == "__main__":
    configure_logging("warning", "console", stream=sys.stderr)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    raise SystemExit(asyncio.run(main()))
