"""`store migrate`'s sessions: each one's history, archive and meta copied as one item."""

from __future__ import annotations

from pathlib import Path

from agenthub.session_keys import SessionKey
from agenthub.storage.copy_run import Checked, CopyRun, Held, agent_dirs, digest_of
from agenthub.storage.files import FileSessionStore
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import PostgresSessionStore
from agenthub.storage.store import HistoryRecord


async def copy_sessions(run: CopyRun, data_dir: Path) -> None:
    source, target = FileSessionStore(data_dir), run.target.sessions
    recorded = await run.target.ledger.digests("sessions")
    for agent in agent_dirs(data_dir):
        for key in await source.list_keys(agent):
            records, archived, meta = (
                await source.load(key),
                await source.read_archive(key),
                await source.read_meta(key),
            )
            weights = {"sessions": 1, "records": len(records), "archived": len(archived), "meta": int(meta is not None)}
            item = Checked("sessions", str(key), session_digest(records, archived, meta), weights, key)
            held = await held_session(target, key, records, archived, meta)

            async def write(
                key: SessionKey = key,
                records: list[HistoryRecord] = records,
                archived: list[HistoryRecord] = archived,
                meta: SessionMeta | None = meta,
            ) -> None:
                await target.rewrite_archive(key, archived)
                await target.replace(key, records, archive=[])
                if meta is not None:  # last: a copy cut short before it is redone whole
                    await target.write_meta(key, meta, durable=True)

            copied = f"copied {key} ({len(records)} records, {len(archived)} archived)"
            await run.settle(item, held, recorded.get(str(key)), write, copied)


def session_digest(records: list[HistoryRecord], archived: list[HistoryRecord], meta: SessionMeta | None) -> str:
    return digest_of({"records": records, "archived": archived, "meta": None if meta is None else meta.to_json()})


async def held_session(
    target: PostgresSessionStore,
    key: SessionKey,
    records: list[HistoryRecord],
    archived: list[HistoryRecord],
    meta: SessionMeta | None,
) -> Held:
    """The database's session; `behind` when each part is a beginning of the files' (`records`, `archived`,
    `meta`), as a copy cut short leaves it."""
    held_records, held_archived, held_meta = (
        await target.load(key),
        await target.read_archive(key),
        await target.read_meta(key),
    )
    if not held_records and not held_archived and held_meta is None:
        return Held(None)
    behind = (
        held_records == records[: len(held_records)]
        and held_archived == archived[: len(held_archived)]
        and (held_meta is None or held_meta == meta)
    )
    return Held(session_digest(held_records, held_archived, held_meta), behind)
