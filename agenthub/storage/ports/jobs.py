"""The scheduled jobs' port (`JobDocuments`): every agent's jobs, each fire recorded once across instances."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agenthub.storage.jobs import FireRecord, JobDocument


class JobDocuments(Protocol):
    """Every agent's jobs. `shared`: other instances write here too (the scheduler reloads what it holds)."""

    shared: bool

    async def load_all(self, agent: str | None = None) -> list[JobDocument]:
        """Every stored job (of `agent` when given)."""
        ...

    async def put(self, document: JobDocument) -> None:
        """Create or replace one job."""
        ...

    async def put_if(self, document: JobDocument, expected_due: float | None) -> bool:
        """Replace one job only if it is stored with `next_due == expected_due` (the due time the change was made
        from: nobody recorded a fire of it or changed it since); True when replaced, False when it was not stored
        so (nothing written)."""
        ...

    async def remove(self, agent: str, job_ids: Collection[str]) -> None:
        """Remove these jobs of `agent` (an absent one is no error)."""
        ...

    async def record_fires(self, fires: Sequence[FireRecord]) -> list[bool]:
        """Record each fire only if its job is still stored with `next_due == due` (nobody recorded that fire or
        changed the job meanwhile); one bool per fire: True when this call recorded it (so it is to be run)."""
        ...
