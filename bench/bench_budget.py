"""Budget benchmark: what a budget check (the prompt estimate, check and reserve, settle) costs in CPU against what
a whole turn costs the daemon, in one run. The fake Messages API runs in a child process, so the daemon's CPU
(`time.process_time`) is the gateway's and the SDK's alone. Target: a check ≤ 5 % of a turn's daemon CPU."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.app import build_gateway, open_stores
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.llm.tokens import estimate_text_tokens
from agenthub.log import configure_logging
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.storage.usage import UsageRow
from agenthub.usage.gate import Admission
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


def _settings(root: Path, base_url: str, dsn: str | None) -> Settings:
    store = {"backend": "postgres", "dsn": dsn} if dsn else {}
    return make_settings(
        root,
        llm={"base_url": base_url, "api_key": "bench-key", "max_retries": 0, "timeout_s": 30},
        budgets={"user_day": 10**12, "user_month": 10**13, "chat_day": 10**12, "agent_month": 10**14},
        store=store,
    )


async def _seed(gw: GatewayCore, people: int, days: int) -> None:
    """A month of usage by `people` people, so the check reads a store of realistic size."""
    assert gw.usage is not None
    today = time.strftime("%Y-%m-")
    rows = [
        UsageRow(f"{today}{d:02d}", "turn", "default", "bench", f"chat-{p}", f"person-{p}", "m", input=1000, output=99)
        for d in range(1, days + 1)
        for p in range(people)
    ]
    await gw.usage.store.add(rows)


async def _turns(gw: GatewayCore, sessions: int, turns: int) -> None:
    async def one(chat: str) -> None:
        for n in range(turns):
            final = await (await gw.submit(InboundMessage("bench", chat, f"person-{chat}", f"turn {n}"))).result()
            if not isinstance(final, DoneEvent):
                raise RuntimeError(f"turn failed: {final}")

    await asyncio.gather(*(one(f"{s}") for s in range(sessions)))


async def _checks(gw: GatewayCore, count: int) -> None:
    """What `TurnRunner._admit` and the settlement do for one turn, `count` times."""
    usage, agent = gw.usage, gw.agents.get("default")
    assert usage is not None
    for n in range(count):
        message = InboundMessage("bench", str(n % 20), f"person-{n % 20}", f"turn {n}")
        _, key = gw.resolve_key(message)
        meta = await gw.history.get_meta(key)
        prompt = sum(int(v) for v in (meta.last_usage or {}).values()) if meta is not None else 0
        estimate = prompt + estimate_text_tokens(message.content) + gw.settings.llm.max_tokens
        admission = await usage.gate.admit(agent, message, estimate, "en", 120.0)
        assert isinstance(admission, Admission)
        usage.gate.settle(admission)
        await usage.gate.drain()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--people", type=int, default=1000, help="people with a month of usage in the store")
    parser.add_argument("--dsn", help="a PostgreSQL database to use instead of the files (it gets the bench's rows)")
    args = parser.parse_args()
    configure_logging("warning", "console", stream=sys.stderr)
    fake = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FAKE, str(ROOT), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert fake.stdout is not None
        port = int((await fake.stdout.readline()).decode())
        with tempfile.TemporaryDirectory() as tmp:
            settings = _settings(Path(tmp), f"http://127.0.0.1:{port}", args.dsn)
            stores = await open_stores(settings)
            async with build_gateway(settings, stores=stores) as gw:
                await _seed(gw, args.people, 28)
                await _turns(gw, 2, 1)  # warm: the SDK imported, the month loaded
                turns = args.sessions * args.turns
                began = time.process_time()
                await _turns(gw, args.sessions, args.turns)
                turn_cpu = (time.process_time() - began) / turns
                began = time.process_time()
                await _checks(gw, turns)
                check_cpu = (time.process_time() - began) / turns
            await stores.aclose()
    finally:
        if fake.stdin is not None:
            fake.stdin.close()
        await fake.wait()
    ratio = check_cpu / turn_cpu
    verdict = "met" if ratio <= 0.05 else "MISSED"
    print(
        f"budget check: {check_cpu * 1e6:.0f} µs CPU; a turn (with its check): {turn_cpu * 1e6:.0f} µs daemon CPU; "
        f"ratio {ratio * 100:.2f} % (target <= 5 %) {verdict}  [{'postgres' if args.dsn else 'files'}, {turns} turns, "
        f"{args.people} people in the store]"
    )


if __name__ == "__main__":
    asyncio.run(main())
