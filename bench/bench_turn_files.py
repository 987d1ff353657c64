"""The files backend's bookkeeping of HTTP turns, fsync on: N sessions at once, each turn an inbox accept, the user
record, the answer and the settle, through the stores the daemon opens (`open_stores`), on a real data directory.
Prints turns/s, the process's CPU per turn (all threads) and the history writer's batches per turn. Run:
`.venv/bin/python bench/bench_turn_files.py` (`PYTHONPATH=<other checkout>` for other code: the ratio between two
runs in one command is what counts on a shared machine)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.session_keys import session_key
from agenthub.storage.ports import Inbox, SessionStore
from agenthub.storage.stores import open_stores
from tests.support.roots import make_settings


async def _turns(inbox: Inbox, sessions: SessionStore, chat: str, turns: int) -> None:
    key = session_key("default", "http", chat)
    for n in range(turns):
        entry = await inbox.accept("http", {"chat_id": chat, "content": f"request {n} " + "x" * 100}, session=str(key))
        user = {"role": "user", "content": f"request {n}", "timestamp": n, "channel": "http", "inbox_id": entry.id}
        await sessions.append(key, [user])
        await sessions.append(key, [{"role": "assistant", "content": [{"type": "text", "text": "answer " * 30}]}])
        await inbox.settle(entry.id)


async def run(root: Path, clients: int, turns: int) -> tuple[float, float, float]:
    stores = await open_stores(make_settings(root, session={"fsync": True}))
    try:
        inbox = stores.inbox
        await _turns(inbox, stores.sessions, "warm", 2)
        writer = getattr(stores.sessions, "writer", None)
        batches = writer.batches if writer is not None else 0
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(_turns(inbox, stores.sessions, f"c{c}", turns) for c in range(clients)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        batches = (writer.batches - batches) if writer is not None else 0
    finally:
        await stores.aclose()
    done = clients * turns
    return done / wall, cpu / done * 1000, batches / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:  # the disk under test, not a tmpfs /tmp
        rate, cpu_ms, batches = asyncio.run(run(Path(tmp), args.clients, args.turns))
    print(
        f"{args.clients} clients x {args.turns} turns: {rate:7.1f} turns/s  cpu {cpu_ms:.3f} ms/turn  "
        f"history batches {batches:.2f}/turn"
    )


if __name__ == "__main__":
    main()
