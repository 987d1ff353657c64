"""Child process for the crash tests: append numbered messages through SessionHistory until killed, or (`atomic`)
rewrite whole files with atomic writes until killed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from agenthub.session.history import SessionHistory
from agenthub.session_keys import session_key
from agenthub.storage.atomic import atomic_write_text


def text_for(seq: int) -> str:
    """The text of message `seq`; the test recomputes it to prove no message came back altered."""
    return f"message {seq} " + "多字节x" * (seq % 97)


def message_for(seq: int) -> dict[str, Any]:
    if seq % 2 == 0:
        return {"role": "user", "content": text_for(seq), "seq": seq}
    return {"role": "assistant", "content": [{"type": "text", "text": text_for(seq)}], "seq": seq}


async def main(data_dir: Path, fsync: bool) -> None:
    history = SessionHistory(data_dir, fsync=fsync)
    key = session_key("default", "cli", "crash")
    seq = len(await history.load(key))  # continue the sequence the last round left on disk
    await history.append(key, message_for(seq))
    print("ready", flush=True)
    while True:
        seq += 1
        width = 1 + seq % 3  # one to three lines in one write
        await history.append(key, *(message_for(s) for s in range(seq, seq + width)))
        seq += width - 1


def version_for(n: int) -> str:
    """Version `n` of a rewritten file: large enough that a kill often lands while its temp file is written."""
    return f"version {n}\n" + "记忆x" * 100_000 + f"\nend {n}\n"


def rewrite_forever(paths: list[Path]) -> None:
    n = 0
    for path in paths:
        atomic_write_text(path, version_for(n))
    print("ready", flush=True)
    while True:
        n += 1
        for path in paths:
            atomic_write_text(path, version_for(n))


if __name__ == "__main__":
    if sys.argv[1] == "atomic":
        rewrite_forever([Path(p) for p in sys.argv[2:]])
    else:
        asyncio.run(main(Path(sys.argv[1]), sys.argv[2] == "fsync"))
