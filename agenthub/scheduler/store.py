"""The scheduler's view of the job stores: the files backend under its old name, and a job's stored document."""

from __future__ import annotations

from collections.abc import Iterable

from agenthub.scheduler.jobs import Job
from agenthub.storage.jobs import FileJobDocuments, JobDocument


class JobStore(FileJobDocuments):
    """`data/<agent>/jobs.json` (design §4); `save` replaces one agent's jobs whole (seeding, tools)."""

    async def save(self, agent: str, jobs: Iterable[Job]) -> None:
        await self.replace_agent(agent, [document(job) for job in jobs])


def document(job: Job) -> JobDocument:
    """A job as its store keeps it."""
    return JobDocument(job.agent, job.id, job.next_due, job.json_text)
