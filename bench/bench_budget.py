"""Budget benchmark: what budgets cost a turn in CPU, in one run. The same turns run on a gateway whose budgets
apply to every turn (each checked, reserved and settled) and on one without budgets, in rounds (each round runs
both, the side that goes first alternating); the median of the rounds' differences of their daemon CPU per turn
(`time.process_time`; the fake Messages API runs in a child process, so this is the gateway's and the SDK's alone)
is what a budget check costs. Target: ≤ 5 % of a turn's daemon CPU."""

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
from agenthub.log import configure_logging
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.storage.stores import Stores
from agenthub.storage.usage import UsageRow
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


async def _gateway(root: Path, url: str, dsn: str | None, budgets: dict[str, Any]) -> tuple[GatewayCore, Stores]:
    settings = _settings(root, url, dsn, budgets)
    stores = await open_stores(settings)
    return build_gateway(settings, stores=stores), stores


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument(
        "--rounds",
        type=int,
        default=11,
        help="rounds (on and off each, the first side alternating); the median of "
        "the rounds' differences is the check's cost",
    )
    parser.add_argument("--people", type=int, default=1000, help="people with a month of usage in the store")
    parser.add_argument(
        "--same", action="store_true", help="no budgets on either side: what the bench reads when nothing differs"
    )
    parser.add_argument("--dsn", help="a PostgreSQL database to use instead of the files (it gets the bench's rows)")
    args = parser.parse_args()
    configure_logging("warning", "console", stream=sys.stderr)
    fake = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FAKE, str(ROOT), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert fake.stdout is not None
        url = f"http://127.0.0.1:{int((await fake.stdout.readline()).decode())}"
        with tempfile.TemporaryDirectory() as tmp:
            limited, limited_stores = await _gateway(Path(tmp) / "limited", url, args.dsn, {} if args.same else LIMITS)
            free, free_stores = await _gateway(Path(tmp) / "free", url, args.dsn, {})
            async with limited, free:
                await _seed(limited, args.people, 28)
                await _seed(free, args.people, 28)  # the same store on both sides: only the checks differ
                await _turns(limited, 2, 1, "warm")  # the SDK imported, the month loaded
                await _turns(free, 2, 1, "warm")
                on, off = [], []
                for r in range(args.rounds):  # which side goes first alternates: a drifting machine hits both
                    if r % 2:
                        off.append(await _turns(free, args.sessions, args.turns, f"off{r}"))
                    on.append(await _turns(limited, args.sessions, args.turns, f"on{r}"))
                    if not r % 2:
                        off.append(await _turns(free, args.sessions, args.turns, f"off{r}"))
            await limited_stores.aclose()
            await free_stores.aclose()
    finally:
        if fake.stdin is not None:
            fake.stdin.close()
        await fake.wait()
    with_budgets, without = statistics.median(on), statistics.median(off)
    diffs = [a - b for a, b in zip(on, off, strict=True)]  # paired: each round's own difference
    check = statistics.median(diffs)
    ratio = check / with_budgets
    verdict = "met" if ratio <= 0.05 else "MISSED"
    backend = "postgres" if args.dsn else "files"
    print(
        f"budget check ({backend}, {args.people} people in the store): a turn costs {with_budgets * 1e6:.0f} µs "
        f"daemon CPU with budgets, {without * 1e6:.0f} µs without; the check {check * 1e6:.0f} µs "
        f"= {ratio * 100:.1f} % of a turn (target <= 5 %) {verdict}  [medians of {args.rounds} rounds of "
        f"{args.sessions * args.turns} turns; per-round differences {', '.join(f'{d * 1e6:.0f}' for d in diffs)} µs]"
    )


if __name__ == "__main__":
    asyncio.run(main())
