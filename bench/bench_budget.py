"""Budget benchmark: what budgets cost a turn in CPU, in one run, measured two ways.

Directly: turns run one at a time on a gateway whose budgets apply to every turn, and the CPU the budget gate
itself reports (`BudgetGate.cpu_seconds`: the checks, the turn's estimate (not the read of the history it is made
from, which the turn's first append makes anyway: since 2026-12-05), reservations, lease bookkeeping, settlements and
the writes that only end reservations; of a section that awaits the store, only its own coroutine's steps:
`CpuMeter.run`) is divided by the daemon's whole CPU for those turns (`time.process_time`, every thread, background
writes included). Paired A/B: the same turns on that gateway and on
one without budgets, in rounds (the side that goes first alternating); the median of the rounds' differences of
their daemon CPU per turn. On a shared machine the A/B's noise (`--same`: both sides without budgets) is larger than
5 %; the direct ratio is the figure the target is read from. The fake Messages API runs in a child process, so the
CPU is the gateway's and the SDK's alone. Target: ≤ 5 % of a turn's daemon CPU.

The direct runs' turns come 10 per person within seconds, so after a person's first turn the rest are admitted from
the instance's lease (no store call). A third figure runs every turn for a new person in a new chat: each asks the
store (as a person does whose turns are more than `LEASE_ADMIT_S` apart), the most a check costs. On PostgreSQL that
check rides in the statement that claims the turn's new session (`usage.ride.Ride`): what it adds to that statement
on the daemon's side, which the gate's meter cannot see, is measured alongside (`_ride_share`) and added.

Once the gateways are warm the bench freezes the objects alive (`hosting.gc_freeze`), as `agenthub serve` does: else
a full collection walks the seeded store and everything loaded (~0.14 s) now and then, and when one starts inside a
measured gate step (a check allocates like any code) the whole pause is charged to the gate: a run's figure then
jumped to 15-24 %.

On the throw-away server each A/B side has a database of its own (since 2026-12-05; `--dsn`: one for both): on one,
each gateway's search index followed the other side's records too (its index statements ran in the other side's
rounds). What a round leaves to the background (its search index following its records, about 30 µs a turn; its
sessions let go) still lands in whichever round runs next, either side's: noise of ±20-30 µs a turn, not a bias (an
idle pause after each round, tried, moved that work into the pause but made `--same` no quieter on a loaded machine,
and counted the pause's idle CPU as the turns')."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway, open_stores
from agenthub.hosting.gc_freeze import freeze_start_up_objects
from agenthub.log import configure_logging
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.session_keys import session_key
from agenthub.storage.ports import RidingReserves
from agenthub.storage.postgres.sessions import PostgresSessionStore
from agenthub.storage.stores import Stores
from agenthub.storage.usage import Claim, Scope, UsageRow
from tests.support.postgres import new_server
from tests.support.roots import make_settings

ROOT = Path(__file__).resolve().parent.parent
FAKE = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from tests.support.fakes.anthropic import FakeAnthropic

async def main():
    async with FakeAnthropic(default_usage={"input_tokens": 900, "output_tokens": 100}) as fake:
        print(fake.port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""
LIMITS = {"user_day": 10**12, "user_month": 10**13, "chat_day": 10**12, "agent_month": 10**14}
USER_LIMITS = {"user_day": 10**12, "user_month": 10**13}
"""Only the senders' own limits: far from them a turn is admitted from its sender's lease, no store call (with a
chat and an agent limit too, from the instance's leases of those scopes as well)."""


def _settings(root: Path, base_url: str, dsn: str | None, budgets: dict[str, Any]) -> Settings:
    store = {"backend": "postgres", "dsn": dsn} if dsn else {}
    return make_settings(
        root,
        llm={"base_url": base_url, "api_key": "bench-key", "max_retries": 0, "timeout_s": 30},
        budgets=budgets,
        store=store,
    )


async def _seed(gw: GatewayCore, people: int, days: int) -> None:
    """A month of usage by `people` people, so the check reads a store of realistic size."""
    assert gw.turn_services.usage is not None
    month = time.strftime("%Y-%m-")
    rows = [
        UsageRow(f"{month}{d:02d}", "turn", "default", "bench", f"c{p}", f"person-{p}", "m", input=1000, output=99)
        for d in range(1, days + 1)
        for p in range(people)
    ]
    for start in range(0, len(rows), 5000):
        await gw.turn_services.usage.store.add(rows[start : start + 5000])
    database = getattr(gw.turn_services.usage.store, "database", None)
    if database is not None:  # PostgreSQL: the planner's statistics of a table in use (autovacuum's, in a minute)
        async with database.connection("analyze the bench's usage") as conn:
            await conn.execute("ANALYZE usage_days")


async def _turns(gw: GatewayCore, sessions: int, turns: int, tag: str) -> float:
    """Daemon CPU seconds per turn of `sessions` concurrent chats × `turns` turns each."""

    async def one(chat: str) -> None:
        for n in range(turns):
            message = InboundMessage("bench", chat, f"person-{chat}", f"turn {n} of {chat}")
            final = await (await gw.submit(message)).result()
            if not isinstance(final, DoneEvent):
                raise RuntimeError(f"turn failed: {final}")

    began = time.process_time()
    await asyncio.gather(*(one(f"{tag}-{s}") for s in range(sessions)))
    if gw.turn_services.usage is not None:
        await gw.turn_services.usage.gate.drain()
    return (time.process_time() - began) / (sessions * turns)


async def _one_at_a_time(gw: GatewayCore, sessions: int, turns: int, tag: str) -> tuple[float, float]:
    """(daemon CPU seconds, of which the budget gate's) for `sessions` chats × `turns` turns run one at a time (each
    chat's turn n before any chat's n + 1), their usage written."""
    assert gw.turn_services.usage is not None
    gate = gw.turn_services.usage.gate
    await gate.drain()
    began, gate_began = time.process_time(), gate.cpu_seconds
    for n in range(turns):
        for s in range(sessions):
            chat = f"{tag}-{s}"
            final = await (await gw.submit(InboundMessage("bench", chat, f"person-{chat}", f"turn {n}"))).result()
            if not isinstance(final, DoneEvent):
                raise RuntimeError(f"turn failed: {final}")
    await gate.drain()
    return time.process_time() - began, gate.cpu_seconds - gate_began


async def _gateway(root: Path, url: str, dsn: str | None, budgets: dict[str, Any]) -> tuple[GatewayCore, Stores]:
    settings = _settings(root, url, dsn, budgets)
    stores = await open_stores(settings)
    return build_gateway(settings, stores=stores), stores


async def measure(args: argparse.Namespace, url: str, dsn: str | None, free_dsn: str | None = None) -> None:
    """Both measures on one backend (files when `dsn` is None), printed; `free_dsn`: the database of the A/B's side
    without budgets (default `dsn`: one database for both)."""
    backend = "postgres" if dsn else "files"
    with tempfile.TemporaryDirectory() as tmp:
        limited, limited_stores = await _gateway(Path(tmp) / "limited", url, dsn, {} if args.same else LIMITS)
        free, free_stores = await _gateway(Path(tmp) / "free", url, free_dsn or dsn, {})
        try:
            async with limited, free:
                await _seed(limited, args.people, 28)
                await _seed(free, args.people, 28)  # the same store on both sides: only the checks differ
                await _turns(limited, 2, 1, "warm")  # the SDK imported, the month loaded
                await _turns(free, 2, 1, "warm")
                if not args.no_freeze:
                    freeze_start_up_objects()  # as `agenthub serve` does once warm (module docstring)
                # before the turns: later, their leases end in the background (30 s on) and blur it
                ride_share = await _ride_share(limited_stores) if dsn else None
                on, off = [], []
                for r in range(args.rounds):  # which side goes first alternates: a drifting machine hits both
                    if r % 2:
                        off.append(await _turns(free, args.sessions, args.turns, f"off{r}"))
                    on.append(await _turns(limited, args.sessions, args.turns, f"on{r}"))
                    if not r % 2:
                        off.append(await _turns(free, args.sessions, args.turns, f"off{r}"))
                direct = [
                    await _one_at_a_time(limited, args.sessions, args.turns, f"seq{r}") for r in range(args.direct)
                ]
                sparse = [
                    await _one_at_a_time(limited, args.sessions * args.turns, 1, f"new{r}") for r in range(args.direct)
                ]
        finally:
            await limited_stores.aclose()
            await free_stores.aclose()
        if not args.same:
            own, own_stores = await _gateway(Path(tmp) / "own", url, dsn, USER_LIMITS)
            try:
                async with own:
                    await _seed(own, args.people, 28)
                    await _turns(own, 2, 1, "warm")
                    if not args.no_freeze:
                        freeze_start_up_objects()
                    direct_own = [
                        await _one_at_a_time(own, args.sessions, args.turns, f"own{r}") for r in range(args.direct)
                    ]
            finally:
                await own_stores.aclose()
    turns = args.sessions * args.turns
    if not args.same:
        _print_direct(f"{backend}, every scope limited", direct, turns, args.people)
        _print_direct(f"{backend}, user limits only", direct_own, turns, args.people)
        _print_direct(
            f"{backend}, every scope limited, each turn a new person and chat (a store call each)",
            sparse,
            turns,
            args.people,
            ride_share,
        )
    with_budgets, without = statistics.median(on), statistics.median(off)
    diffs = [a - b for a, b in zip(on, off, strict=True)]  # paired: each round's own difference
    check = statistics.median(diffs)
    ratio = check / with_budgets
    print(
        f"budget check ({backend}), paired A/B{' (--same: no budgets on either side)' if args.same else ''}: "
        f"a turn costs {with_budgets * 1e6:.0f} µs daemon CPU with budgets, {without * 1e6:.0f} µs without; "
        f"the difference {check * 1e6:.0f} µs = {ratio * 100:.1f} % of a turn  [medians of {args.rounds} rounds of "
        f"{turns} concurrent turns; per-round differences {', '.join(f'{d * 1e6:.0f}' for d in diffs)} µs]"
    )


def _print_direct(
    what: str, runs: list[tuple[float, float]], turns: int, people: int, measured: float | None = None
) -> None:
    """`measured`: CPU seconds per turn the gate's meter cannot see (its check's share of the session's claim, added
    when above 0; None: not measured, no claim rides)."""
    ride = max(0.0, measured or 0.0)
    count = turns * len(runs)
    total, gate = sum(r[0] for r in runs), sum(r[1] for r in runs) + ride * count
    ratio = gate / total
    riding = ""
    if measured is not None and ride > 0:
        riding = f", of which {ride * 1e6:.0f} µs its share of the session's claim (`_ride_share`)"
    elif measured is not None:
        riding = f" (its share of the session's claim measured {measured * 1e6:.0f} µs: none counted)"
    print(
        f"budget check ({what}; {people} people in the store), direct: the gate's CPU "
        f"{gate / count * 1e6:.0f} µs{riding} of {total / count * 1e6:.0f} µs daemon CPU per "
        f"turn = {ratio * 100:.2f} % (target <= 5 %) {'met' if ratio <= 0.05 else 'MISSED'}  [{len(runs)} runs of "
        f"{turns} turns one at a time; per run {', '.join(f'{(g + ride * turns) / t * 100:.2f} %' for t, g in runs)}]"
    )


async def _ride_share(stores: Stores, claims: int = 300, rounds: int = 6) -> float:
    """CPU seconds a check riding in a session's claim adds to the claim's statement on the daemon's side (the
    parameters sent, the rows read, the longer statement waited for), which the gate's meter does not see: claims
    of new sessions with a ride and without, through the same pool, in alternating rounds; the median difference,
    less the ride's making (which the meter counts). At or below 0 when a claim without a ride costs as much (claims
    without a ride go through the instance's group commit, `postgres/claims.py`, a ride's alone)."""
    sessions, usage = stores.sessions, stores.usage
    if not isinstance(sessions, PostgresSessionStore) or not isinstance(usage, RidingReserves):
        return 0.0

    async def claim(tag: str, riding: bool) -> float:
        made = 0.0
        began = time.process_time()
        for n in range(claims):
            scopes = [
                Claim(Scope("user", "bench", f"{tag}-{n}"), 10**12, 10**13),
                Claim(Scope("chat", "bench", f"{tag}-{n}"), 10**12),
            ]
            at = time.process_time()
            ride = usage.ride(scopes, time.strftime("%Y-%m-%d"), 1000, 60.0) if riding else None
            made += time.process_time() - at
            key = session_key("default", "bench", f"{tag}-{n}")
            await sessions.claim(key, f"session:bench-{tag}-{n}", "bench", 15.0, ride=ride)
        return (time.process_time() - began - made) / claims

    diffs = []
    for r in range(rounds):
        if r % 2:
            with_ride = await claim(f"ride{r}", True)
            alone = await claim(f"alone{r}", False)
        else:
            alone = await claim(f"alone{r}", False)
            with_ride = await claim(f"ride{r}", True)
        diffs.append(with_ride - alone)
    return statistics.median(diffs)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument(
        "--rounds",
        type=int,
        default=11,
        help="A/B rounds (on and off each, the first side alternating); the median of the rounds' differences",
    )
    parser.add_argument("--direct", type=int, default=3, help="runs of one-at-a-time turns the gate's CPU is read on")
    parser.add_argument("--people", type=int, default=1000, help="people with a month of usage in the store")
    parser.add_argument(
        "--same", action="store_true", help="no budgets on either side: what the A/B reads when nothing differs"
    )
    parser.add_argument(
        "--backend",
        choices=["files", "postgres", "both"],
        default="both",
        help="postgres: a throw-away server of its own (initdb; see tests/support/postgres.py)",
    )
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="leave the start-up objects to the collector (as before 2026-12-04: a full collection inside a gate step "
        "then makes a run's figure jump)",
    )
    parser.add_argument("--dsn", help="an existing PostgreSQL database instead of a throw-away server (it gets rows)")
    args = parser.parse_args()
    configure_logging("warning", "console", stream=sys.stderr)
    fake = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FAKE, str(ROOT), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert fake.stdout is not None
        url = f"http://127.0.0.1:{int((await fake.stdout.readline()).decode())}"
        if args.backend in ("files", "both") and not args.dsn:
            await measure(args, url, None)
        if args.dsn:
            await measure(args, url, args.dsn)
        elif args.backend in ("postgres", "both"):
            server = new_server()
            try:
                await measure(args, url, server.create_database(), server.create_database())
            finally:
                server.remove()
    finally:
        if fake.stdin is not None:
            fake.stdin.close()
        await fake.wait()


if __name__ == "__main__":
    asyncio.run(main())
