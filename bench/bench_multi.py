"""Several-instance benchmark, in one run, on real `agenthub serve` processes (tests/support/daemons.py):

1. N sessions x M turns (JSON chats, a session's turns one after another, the sessions at once) at a fake model
   of L ms, one instance on PostgreSQL over the same on files (target <= 1.3);
2. the same with three instances on one database behind a round-robin client, over one instance (target <= 1.0;
   a chat's turn then lands where its last one did about a third of the time); for information, the same three
   behind a client that sends each chat to one instance (a load balancer hashing the chat id): no session moves;
   the setups run one after another, `--repeat` rounds of them, and each ratio is the median of its rounds' (a
   round's setups ran under the same load: one run of a second and a half is at the mercy of the box's noise);
   each setup also prints its CPU a turn (instances, database server, this process), and, for information, the
   ratios of the deployment's CPU a turn (instances + database server), which the box's noise moves far less;
3. failover: `kill -9` of an instance right after it accepted messages whose turns are at the model; the time
   from the kill to the first answer of one of them (a completed model call from another process), p50 / max over
   R rounds. The killed instance is restarted at once, as systemd's `Restart=` would: the answer may come from a
   survivor (a claimable inbox) or from the restarted instance (which resumes its own inbox); which one is shown.

Durable on both sides: history fsync on, and a PostgreSQL with fsync and synchronous commit (its own server, in a
temp dir). The fake model runs on its own thread, the load and the instances' control in this one.
Run: `.venv/bin/python bench/bench_multi.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from bench_http import TICKS_PER_S, LoopThread, _cpu_s
from psycopg.conninfo import conninfo_to_dict

from agenthub.log import configure_logging
from tests.support.daemons import Client, Deployment, Instance, Sent, chat_of, message_text, process_of
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest
from tests.support.postgres import PostgresServer, new_server

WARM_SESSIONS = 20
FAILOVER_BOUND_S = 60.0
"""How long a round waits for an answer before it reports none."""


@dataclass
class Setup:
    label: str
    instances: int
    database: bool
    sticky: bool = False
    """Each chat to one instance (by a hash of its id), else round robin over all."""


async def _session(client: Client, chat: str, turns: int, sticky: bool = False) -> None:
    instances = client.deployment.instances
    instance = instances[zlib.crc32(chat.encode()) % len(instances)] if sticky else None
    for turn in range(turns):
        status, body = await client.chat(chat, message_text(chat, turn), instance)
        if status != 200:
            raise RuntimeError(f"{chat} turn {turn}: {status} {body}")


def _env(args: argparse.Namespace) -> dict[str, str]:
    return {
        "AGENTHUB_SESSION__FSYNC": "true",
        "AGENTHUB_SESSION__MAX_CONCURRENT_LLM": str(max(64, args.sessions)),  # the cap is not what is measured
        "AGENTHUB_LOG_LEVEL": "warning",
    }


@dataclass(frozen=True)
class Measured:
    wall_s: float
    cpu_ms: float
    """CPU a turn of the instances and the database server (every process of each): what the deployment spends."""


async def throughput(
    setup: Setup, fake: FakeAnthropic, pg: PostgresServer, root: Path, args: argparse.Namespace
) -> Measured:
    """Wall time and CPU a turn of `args.sessions` sessions x `args.turns` turns on `setup`."""
    dsn = pg.create_database() if setup.database else None
    statements = Statements(pg.dsn(), dsn) if args.statements and dsn is not None else None
    where = root / setup.label.replace(" ", "-").replace(",", "")
    async with Deployment(where, fake, count=setup.instances, dsn=dsn, lease_s=args.lease_s, env=_env(args)) as d:
        await d.start_all()
        client = d.client()
        await asyncio.gather(*(_session(client, f"warm-{i}", 1) for i in range(WARM_SESSIONS)))
        if setup.database:  # the warm-up's sessions, kept idle, are let go (`lease_s / 3`) before the measure
            await asyncio.sleep(args.lease_s / 3 + 0.5)
        if statements is not None:
            await statements.reset()
        fake.requests.clear()  # kept, what it recorded (bodies and all) slows this process down round by round
        cpu_before, pg_before, own_before = _instances_cpu_s(d), _server_cpu_s(pg), time.process_time()
        began = time.perf_counter()
        await asyncio.gather(*(_session(client, f"s{i}", args.turns, setup.sticky) for i in range(args.sessions)))
        wall = time.perf_counter() - began
        turns = args.sessions * args.turns
        cpu_ms = (_instances_cpu_s(d) - cpu_before) / turns * 1000
        pg_ms = (_server_cpu_s(pg) - pg_before) / turns * 1000 if setup.database else None
        own_ms = (time.process_time() - own_before) / turns * 1000
        if statements is not None:
            await statements.report(setup.label, args.sessions * args.turns)
    ideal = args.turns * args.latency_ms / 1000
    print(
        f"  {setup.label:<28} wall {wall:6.2f} s  ({wall / ideal:5.2f}x the ideal {ideal:.2f} s), "
        f"CPU ms/turn: instances {cpu_ms:.2f}"
        + ("" if pg_ms is None else f" + postgres {pg_ms:.2f}")
        + f", load and fake model {own_ms:.2f}"
    )
    return Measured(wall, cpu_ms + (pg_ms or 0.0))


@dataclass
class Statements:
    """pg_stat_statements of the deployment's database (`--statements`): reset after the warm-up, then the
    statements the measured turns ran, each with its calls and the rows it returned or changed per turn (a let-go's
    or a claim's rows: the sessions it let go or claimed); the total is the turn's round trips (every statement is
    one: the daemon sends no pipelines)."""

    admin_dsn: str
    dsn: str
    shown: int = 25

    async def reset(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.admin_dsn, autocommit=True) as conn:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute("SELECT pg_stat_statements_reset()")

    async def report(self, label: str, turns: int) -> None:
        dbname = conninfo_to_dict(self.dsn)["dbname"]
        async with await psycopg.AsyncConnection.connect(self.admin_dsn, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT s.calls, s.mean_exec_time, s.query, s.rows FROM pg_stat_statements s"
                " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s ORDER BY s.calls DESC",
                [dbname],
            )
            rows = await cursor.fetchall()
        total = sum(int(row[0]) for row in rows)
        print(f"  {label}: {total / turns:.2f} statements per turn ({total} for {turns} turns)")
        for calls, mean_ms, query, returned in rows[: self.shown]:
            text = " ".join(str(query).split())[:100]
            print(
                f"    {int(calls) / turns:6.2f}/turn {int(returned) / turns:5.2f} rows {float(mean_ms):6.2f} ms  {text}"
            )


def _instances_cpu_s(d: Deployment) -> float:
    """CPU seconds the instances' processes used so far (all their threads)."""
    return sum(_cpu_s(i.process.pid) for i in d.instances if i.process is not None and i.alive)


def _server_cpu_s(pg: PostgresServer) -> float:
    """CPU seconds the database server used so far: the postmaster and its children alive now, and the children it
    has reaped (its cutime + cstime: a backend or autovacuum worker that exits during a measure still counts)."""
    if pg.process is None:
        return 0.0
    root, total = pg.process.pid, 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(entry.name) == root:
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICKS_PER_S
        elif int(fields[1]) == root:
            total += (int(fields[11]) + int(fields[12])) / TICKS_PER_S
    return total


@dataclass
class Failover:
    seconds: float | None
    """From the kill to the first completed model call, by another process, for a message the victim had
    accepted; None when none came within FAILOVER_BOUND_S."""
    by: str


def _first_answer(fake: FakeAnthropic, chats: set[str], killed: tuple[int, int]) -> RecordedRequest | None:
    for request in list(fake.requests):  # the fake's thread appends: a snapshot
        if request.body is None or not request.completed.is_set() or process_of(request) == killed:
            continue
        if chat_of(request.body) in chats:
            return request
    return None


async def _failover_round(d: Deployment, client: Client, fake: FakeAnthropic, r: int, per_round: int) -> Failover:
    victim = d.instances[r % len(d.instances)]
    sent: list[Sent] = [client.send(f"f{r}-{j}", message_text(f"f{r}-{j}", 0), victim) for j in range(per_round)]
    for one in sent:
        if not await one.accepted:
            raise RuntimeError(f"round {r}: {one.chat_id} was not accepted")
    await asyncio.sleep(0.05)  # their turns are at the model (it takes its latency to answer)
    killed = (victim.index, victim.start_number)
    killed_at = await d.kill(victim.index)
    restart = asyncio.create_task(d.restart(victim.index))
    chats = {one.chat_id for one in sent}
    answer = None
    while answer is None and time.monotonic() - killed_at < FAILOVER_BOUND_S:
        await asyncio.sleep(0.01)
        answer = _first_answer(fake, chats, killed)
    seconds = time.monotonic() - killed_at if answer is not None else None
    await restart
    await asyncio.gather(*(one.reply for one in sent))
    return Failover(seconds, _who(answer, victim))


def _who(answer: RecordedRequest | None, victim: Instance) -> str:
    process = None if answer is None else process_of(answer)
    if process is None:
        return "nobody"
    return "the restarted instance" if process[0] == victim.index else "a survivor"


async def failover(fake: FakeAnthropic, pg: PostgresServer, root: Path, args: argparse.Namespace) -> list[Failover]:
    async with Deployment(
        root / "failover", fake, count=3, dsn=pg.create_database(), lease_s=args.lease_s, env=_env(args)
    ) as d:
        await d.start_all()
        client = d.client()
        return [await _failover_round(d, client, fake, r, args.per_round) for r in range(args.rounds)]


def _report_failover(rounds: list[Failover], lease_s: float) -> None:
    answered = sorted(f.seconds for f in rounds if f.seconds is not None)
    who = ", ".join(f"{f.by}" for f in rounds)
    if not answered:
        print(f"  no round got an answer within {FAILOVER_BOUND_S:.0f} s")
        return
    missing = len(rounds) - len(answered)
    print(
        f"  kill -9 -> first answer of an accepted message, lease_s {lease_s:g}: "
        f"p50 {statistics.median(answered):.2f} s,"
        f" max {answered[-1]:.2f} s over {len(answered)} rounds" + (f" ({missing} unanswered)" if missing else "")
    )
    print(f"  answered by: {who}")


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


SETUPS = (
    Setup("one instance, files", 1, False),
    Setup("one instance, postgres", 1, True),
    Setup("three instances, postgres", 3, True),
    Setup("three instances, by chat", 3, True, sticky=True),
)


async def run(fake: FakeAnthropic, pg: PostgresServer, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(
            f"throughput: {args.sessions} sessions x {args.turns} turns at {args.latency_ms:.0f} ms (durable), "
            f"{args.repeat} round(s) of every setup in turn"
        )
        measured: dict[str, list[Measured]] = {s.label: [] for s in SETUPS}
        for r in range(args.repeat):
            for setup in SETUPS:
                measured[setup.label].append(await throughput(setup, fake, pg, root / f"r{r}", args))
        _report_ratios(measured)
        if args.statements:
            return
        print(f"failover: {args.rounds} rounds, {args.per_round} messages accepted by the killed instance each")
        _report_failover(await failover(fake, pg, root, args), args.lease_s)


def _report_ratios(measured: dict[str, list[Measured]]) -> None:
    """Each ratio of one round's walls (the setups of a round ran one after another, under the same load), and
    their median: the figure a target is read against. For information, the same of the CPU a turn the deployment
    spends (instances and database server): steadier than the walls, and what more instances cost. One instance's
    wall is bound by its own process on one core (the database server and this process on the other), three
    instances' by the whole box: the load and the fake model share the cores with them, not with one."""
    files, one, three, sticky = (measured[s.label] for s in SETUPS)
    for what, over, under, target, of in (
        ("postgres / files, one instance", one, files, 1.3, _wall),
        ("three instances / one, postgres", three, one, 1.0, _wall),
        ("three instances by chat / one (information: no session moves)", sticky, one, None, _wall),
        ("three instances / one, deployment CPU a turn (instances + postgres; information)", three, one, None, _cpu),
        ("three by chat / one, deployment CPU a turn (information)", sticky, one, None, _cpu),
    ):
        ratios = [of(a) / of(b) for a, b in zip(over, under, strict=True)]
        median = statistics.median(ratios)
        each = " ".join(f"{x:.2f}" for x in ratios)
        verdict = "" if target is None else f" (target <= {target}) {_verdict(median <= target)}"
        print(f"  {what}: {median:.2f}{verdict}" + (f"  [rounds: {each}]" if len(ratios) > 1 else ""))


def _wall(m: Measured) -> float:
    return m.wall_s


def _cpu(m: Measured) -> float:
    return m.cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of the throughput setups (the ratios' median is reported)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="failover rounds")
    parser.add_argument("--per-round", type=int, default=5, help="messages the killed instance accepted")
    parser.add_argument("--lease-s", type=float, default=2.0, help="[store] lease_s of every instance")
    parser.add_argument(
        "--statements",
        action="store_true",
        help="list the statements per turn on PostgreSQL (pg_stat_statements), and skip the failover part",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    configure_logging("warning", "console", stream=sys.stderr)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    llm_thread = LoopThread()
    fake = FakeAnthropic(first_byte_delay_s=args.latency_ms / 1000)
    llm_thread.run(fake.start())
    preload = {"shared_preload_libraries": "pg_stat_statements"} if args.statements else {}
    pg = new_server(durable=True, settings=preload)
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        asyncio.run(run(fake, pg, args))
    finally:
        pg.remove()
        llm_thread.run(fake.stop())
        llm_thread.close()


if __name__ == "__main__":
    main()
