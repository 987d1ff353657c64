"""Scheduled jobs as stored documents: the `JobDocuments` protocol and its files backend (`data/<agent>/jobs.json`,
one file per agent, every write atomic). Storage knows a job only as JSON keyed by agent and job id, plus its next
due time, which guards the record of a fire so a due time runs once across instances."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agenthub import jsonsafe
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.paths import AgentLayout

log = structlog.get_logger(__name__)

FILE_NAME = "jobs.json"
VERSION = 1


@dataclass(frozen=True)
class JobDocument:
    """One stored job: `text` is its JSON object (the scheduler's to read); `next_due` is None once it has run."""

    agent: str
    job_id: str
    next_due: float | None
    text: str


@dataclass(frozen=True)
class FireRecord:
    """The record of one fire: the job stored with `next_due == due` becomes `after` (None: it is removed)."""

    agent: str
    job_id: str
    due: float
    after: JobDocument | None


class FileJobDocuments:
    """The files of design §4: one `jobs.json` per agent, read whole on first use and rewritten whole for each
    change, one write at a time per agent. A change reaches what `load_all` returns only once its file is written:
    a refused write changes nothing, and no later write brings it back."""

    shared = False

    def __init__(self, data_dir: Path, *, durable: bool = True) -> None:
        self.data_dir = data_dir
        self.durable = durable
        self._by_agent: dict[str, dict[str, JobDocument]] | None = None
        self._loading = asyncio.Lock()
        self._write_locks: dict[str, asyncio.Lock] = {}

    def path(self, agent: str) -> Path:
        return AgentLayout(self.data_dir, agent).root / FILE_NAME

    async def load_all(self, agent: str | None = None) -> list[JobDocument]:
        jobs = await self._loaded()
        agents = [agent] if agent is not None else list(jobs)
        return [doc for name in agents for doc in jobs.get(name, {}).values()]

    async def put(self, document: JobDocument) -> None:
        def change(jobs: dict[str, JobDocument]) -> bool:
            jobs[document.job_id] = document
            return True

        await self._change(document.agent, change)

    async def put_if(self, document: JobDocument, expected_due: float | None) -> bool:
        replaced = False

        def change(jobs: dict[str, JobDocument]) -> bool:
            nonlocal replaced
            current = jobs.get(document.job_id)
            replaced = current is not None and current.next_due == expected_due
            if replaced:
                jobs[document.job_id] = document
            return replaced

        await self._change(document.agent, change)
        return replaced

    async def remove(self, agent: str, job_ids: Collection[str]) -> None:
        def change(jobs: dict[str, JobDocument]) -> bool:
            return [jobs.pop(job_id) for job_id in job_ids if job_id in jobs] != []

        await self._change(agent, change)

    async def replace_agent(self, agent: str, documents: Sequence[JobDocument]) -> None:
        """Make `documents` the agent's only jobs, in one write (seeding a file, tests and benches)."""

        def change(jobs: dict[str, JobDocument]) -> bool:
            jobs.clear()
            jobs.update((doc.job_id, doc) for doc in documents)
            return True

        await self._change(agent, change)

    async def record_fires(self, fires: Sequence[FireRecord]) -> list[bool]:
        """One write per agent (in parallel), each holding all of that agent's fires."""
        recorded: dict[int, bool] = {}

        async def record(agent: str, indexed: list[tuple[int, FireRecord]]) -> None:
            def change(jobs: dict[str, JobDocument]) -> bool:
                for i, fire in indexed:
                    recorded[i] = self._record(jobs, fire)
                return any(recorded[i] for i, _ in indexed)

            await self._change(agent, change)

        by_agent: dict[str, list[tuple[int, FireRecord]]] = {}
        for i, fire in enumerate(fires):
            by_agent.setdefault(fire.agent, []).append((i, fire))
        await asyncio.gather(*(record(agent, indexed) for agent, indexed in by_agent.items()))
        return [recorded[i] for i in range(len(fires))]

    @staticmethod
    def _record(jobs: dict[str, JobDocument], fire: FireRecord) -> bool:
        current = jobs.get(fire.job_id)
        if current is None or current.next_due != fire.due:
            return False
        if fire.after is None:
            del jobs[fire.job_id]
        else:
            jobs[fire.job_id] = fire.after
        return True

    async def _loaded(self) -> dict[str, dict[str, JobDocument]]:
        if self._by_agent is None:
            async with self._loading:
                if self._by_agent is None:
                    self._by_agent = await asyncio.to_thread(self._read_all)
        return self._by_agent

    async def _change(self, agent: str, change: Callable[[dict[str, JobDocument]], bool]) -> None:
        """Apply `change` to a copy of the agent's jobs, write the copy when it says something changed, and only
        then make it current."""
        every = await self._loaded()
        async with self._write_locks.setdefault(agent, asyncio.Lock()):
            jobs = dict(every.get(agent, {}))
            if change(jobs):
                texts = [doc.text for doc in jobs.values()]
                await asyncio.to_thread(self._write, self.path(agent), texts)
                every[agent] = jobs

    def _write(self, path: Path, texts: list[str]) -> None:
        atomic_write_text(path, f'{{"version":{VERSION},"jobs":[{",".join(texts)}]}}\n', durable=self.durable)

    def _read_all(self) -> dict[str, dict[str, JobDocument]]:
        jobs: dict[str, dict[str, JobDocument]] = {}
        if not self.data_dir.is_dir():
            return jobs
        for path in sorted(self.data_dir.glob(f"*/{FILE_NAME}")):
            for doc in self._read_file(path):
                jobs.setdefault(doc.agent, {})[doc.job_id] = doc
        return jobs

    def _read_file(self, path: Path) -> list[JobDocument]:
        try:
            items = jsonsafe.loads(path.read_text(encoding="utf-8"))["jobs"]
            if not isinstance(items, list):
                raise TypeError("jobs is not a list")
        except (OSError, ValueError, KeyError, TypeError) as e:
            aside = path.with_name(f"{FILE_NAME}.broken-{int(time.time())}")
            path.rename(aside)
            log.error("jobs_file_unreadable", path=str(path), moved_to=str(aside), error_type=type(e).__name__)
            return []
        return [doc for item in items if (doc := document_or_none(item, str(path))) is not None]


def document_or_none(item: Any, where: str) -> JobDocument | None:
    """A stored job object as a document, or None (logged) when it lacks a text id and agent or its due time is
    not a number; the scheduler checks the rest."""
    if isinstance(item, dict):
        agent, job_id, next_due = item.get("agent"), item.get("id"), item.get("next_due")
        due_ok = next_due is None or (isinstance(next_due, int | float) and not isinstance(next_due, bool))
        if isinstance(agent, str) and isinstance(job_id, str) and due_ok:
            return JobDocument(agent, job_id, None if next_due is None else float(next_due), encode(item))
    job_id = str(item.get("id"))[:40] if isinstance(item, dict) else None
    log.error("job_unreadable", path=where, job_id=job_id, reason="not a job object with a text id and agent")
    return None


def encode(item: dict[str, Any]) -> str:
    """A job object as stored: compact, non-ASCII kept (a lone surrogate escaped: `utf8_dumps`)."""
    return jsonsafe.utf8_dumps(item, compact=True)
