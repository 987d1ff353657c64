"""Jobs on disk: `data/<agent>/jobs.json`, one file per agent, every write atomic (temp file, fsync, rename)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import structlog

from agenthub import jsonsafe
from agenthub.scheduler.jobs import Job
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.paths import AgentLayout

log = structlog.get_logger(__name__)

FILE_NAME = "jobs.json"
VERSION = 1


class JobStore:
    """Reads every agent's jobs at start; rewrites one agent's file whole, one write at a time per agent."""

    def __init__(self, data_dir: Path, *, durable: bool = True) -> None:
        self.data_dir = data_dir
        self.durable = durable
        self._locks: dict[str, asyncio.Lock] = {}

    def path(self, agent: str) -> Path:
        return AgentLayout(self.data_dir, agent).root / FILE_NAME

    async def load_all(self) -> list[Job]:
        return await asyncio.to_thread(self._load_all)

    async def save(self, agent: str, jobs: list[Job]) -> None:
        """Replace the agent's file with `jobs` (a snapshot taken by the caller before it awaits)."""
        lock = self._locks.setdefault(agent, asyncio.Lock())
        async with lock:
            await asyncio.to_thread(self._write, self.path(agent), jobs)

    def _write(self, path: Path, jobs: list[Job]) -> None:
        encoded = ",".join(job.json_text for job in jobs)  # jobs are frozen: encoding off the loop is safe
        atomic_write_text(path, f'{{"version":{VERSION},"jobs":[{encoded}]}}\n', durable=self.durable)

    def _load_all(self) -> list[Job]:
        if not self.data_dir.is_dir():
            return []
        jobs: list[Job] = []
        for path in sorted(self.data_dir.glob(f"*/{FILE_NAME}")):
            jobs.extend(self._load_file(path))
        return jobs

    def _load_file(self, path: Path) -> list[Job]:
        try:
            items = jsonsafe.loads(path.read_text(encoding="utf-8"))["jobs"]
            if not isinstance(items, list):
                raise TypeError("jobs is not a list")
        except (OSError, ValueError, KeyError, TypeError) as e:
            aside = path.with_name(f"{FILE_NAME}.broken-{int(time.time())}")
            path.rename(aside)
            log.error("jobs_file_unreadable", path=str(path), moved_to=str(aside), error_type=type(e).__name__)
            return []
        return [job for item in items if (job := _job_or_none(item, path)) is not None]


def _job_or_none(item: Any, path: Path) -> Job | None:
    """One stored job, or None (logged) when that entry is damaged; the other jobs still load."""
    try:
        if not isinstance(item, dict):
            raise ValueError("not an object")
        return Job.from_json(item)
    except ValueError as e:  # JobError and CronError included
        log.error(
            "job_unreadable",
            path=str(path),
            job_id=str(item.get("id"))[:40] if isinstance(item, dict) else None,
            reason=str(e)[:200],
        )
        return None
