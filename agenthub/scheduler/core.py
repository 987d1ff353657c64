"""The scheduler: jobs in memory with a heap of due times, one task sleeping until the earliest (never a scan).
The jobs live in a `JobDocuments` store; when it is shared (postgres) every change goes there first, the lease
holder reloads it when it gains the lease and every `refresh_s`, and a fire runs only if this instance recorded it."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import replace

import structlog

from agenthub import jsonsafe
from agenthub.clock import Clock, sleep_until, system_clock
from agenthub.config import SchedulerSettings
from agenthub.scheduler.jobs import Job, JobConflictError, JobError
from agenthub.scheduler.store import document
from agenthub.session_keys import SessionKey
from agenthub.storage.jobs import FireRecord, JobDocument
from agenthub.storage.ports import JobDocuments

log = structlog.get_logger(__name__)

FireFn = Callable[[Job, float], Awaitable[None]]
"""Runs one due job (the job as it was when due, and the due time); the scheduler has recorded it already."""

REFRESH_S = 2.0
"""How often the lease holder reloads a shared store's jobs (changes made on other instances)."""


class Scheduler:
    """Owns every agent's jobs. A due job is recorded durably (one-off removed, recurring advanced) BEFORE it is
    handed to `fire`, so a crash in between skips that run rather than sending it twice; the record is guarded by
    the job's stored due time, so of several instances exactly one records (and runs) each fire."""

    def __init__(
        self,
        config: SchedulerSettings,
        store: JobDocuments,
        *,
        clock: Clock = system_clock,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.refresh_s = refresh_s
        self._by_agent: dict[str, dict[str, Job]] = {}
        self._heap: list[tuple[float, int, str, str]] = []  # (due, seq, agent, job id); stale entries skipped
        self._live: dict[tuple[str, str], int] = {}  # (agent, job id) → the seq of its one valid heap entry
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._writes = 0  # bumped when a store write starts and when it ends: a reload that saw one is not used
        self._writing = 0
        self.serving = False
        """Set by `agenthub serve` (any instance of it, leader or not): jobs fire somewhere in the deployment."""
        self._fire: FireFn | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._started_at = 0.0
        self.fired = 0
        self.skipped = 0

    # ---- lifecycle -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether due jobs fire now (started by `agenthub serve`); a stand-alone `agenthub chat` only stores them."""
        return self._task is not None

    async def start(self, fire: FireFn) -> None:
        """Load the jobs and start sleeping until the first is due; overdue ones are handled at once."""
        await self.ensure_loaded()
        await self.refresh()  # a shared store: what other instances did while another one held the lease
        self._fire = fire
        self._started_at = self.clock()
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="scheduler")
        if self.store.shared and self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_loop(), name="scheduler-refresh")
        log.info("scheduler_started", jobs=len(self))

    async def pause(self) -> None:
        """Fire nothing more; runs already handed to delivery go on."""
        for task in (self._task, self._refresher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._refresher = None

    async def stop(self, grace_s: float = 0.0) -> None:
        """Pause, give the runs in delivery up to `grace_s` to finish (they are recorded already), cancel the rest."""
        await self.pause()
        if self._running and grace_s > 0:
            await asyncio.wait(list(self._running), timeout=grace_s)
        tasks = list(self._running)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def ensure_loaded(self) -> None:
        async with self._load_lock:
            if self._loaded:
                return
            for job in _jobs_of(await self.store.load_all()):
                self._put(job)
            self._loaded = True

    async def sync(self, agent: str | None = None) -> None:
        """Before a query or a change: the jobs as stored now (of `agent` when given) on a shared store."""
        await self.ensure_loaded()
        await self.refresh(agent)

    async def refresh(self, agent: str | None = None, *, always: bool = False) -> None:
        """Reload a shared store's jobs (any store's when `always`; of `agent` when given) into memory: added,
        changed and removed ones. A reload that overlapped a write of ours is dropped (it may predate the write);
        the next one is used."""
        if not (self.store.shared or always):
            return
        writes = self._writes
        if self._writing:
            return
        stored = await self.store.load_all(agent)
        if self._writes != writes:
            return
        self._reconcile(stored, [agent] if agent is not None else list(self._by_agent))

    def _reconcile(self, stored: list[JobDocument], agents: Iterable[str]) -> None:
        texts = {(doc.agent, doc.job_id): doc.text for doc in stored}
        for agent in agents:
            for job_id in [j for j in self._by_agent.get(agent, {}) if (agent, j) not in texts]:
                self._set(agent, job_id, None)
        for job in _jobs_of(doc for doc in stored if self._differs(doc)):
            self._put(job)

    def _differs(self, doc: JobDocument) -> bool:
        current = self.get(doc.agent, doc.job_id)
        return current is None or current.json_text != doc.text

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.refresh()
            except Exception:  # the store is away: the jobs held stay as they are, the next round tries again
                log.warning("jobs_refresh_failed", exc_info=True)

    @contextlib.asynccontextmanager
    async def _store_write(self) -> AsyncIterator[None]:
        self._writes += 1
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            self._writes += 1

    def __len__(self) -> int:
        return sum(len(jobs) for jobs in self._by_agent.values())

    # ---- queries and changes -------------------------------------------------------------------

    def for_agent(self, agent: str) -> list[Job]:
        return sorted(self._by_agent.get(agent, {}).values(), key=_order)

    def for_chat(self, key: SessionKey) -> list[Job]:
        return [j for j in self.for_agent(key.agent) if j.channel == key.channel and j.chat_id == key.chat_id]

    def get(self, agent: str, job_id: str, key: SessionKey | None = None) -> Job | None:
        job = self._by_agent.get(agent, {}).get(job_id)
        if job is None or (key is not None and job.key != key):
            return None
        return job

    async def add(self, job: Job) -> Job:
        """Store a new job durably; refused when its chat already has `max_jobs_per_chat`."""
        await self.sync(job.agent)
        limit = self.config.max_jobs_per_chat
        if len(self.for_chat(job.key)) >= limit:
            raise JobError(f"this chat already has {limit} jobs; delete one first")
        await self._commit(job.agent, job.id, job, None)
        log.info("job_created", agent=job.agent, job_id=job.id, cron=job.cron, next_due=job.next_due)
        return job

    async def update(self, job: Job) -> Job:
        """Store a change of a job, built from the job as this scheduler holds it now (the caller read it after
        a `sync`). The store takes it only if the job is still stored with the due time it was read with: a fire
        recorded (or a change made) since on any instance refuses it (JobConflictError, the job reloaded), so
        an edit never puts a due time back that has run."""
        await self.ensure_loaded()
        before = self.get(job.agent, job.id)
        if before is None:
            raise JobError(f"no job {job.id!r} in this chat")
        await self._commit(job.agent, job.id, job, before, guarded=True)
        log.info("job_updated", agent=job.agent, job_id=job.id, next_due=job.next_due)
        return job

    async def delete(self, agent: str, job_id: str, key: SessionKey | None = None) -> Job | None:
        """Remove a job (of `key`'s chat when given); its pending heap entry goes stale and is skipped."""
        await self.sync(agent)
        job = self.get(agent, job_id, key)
        if job is None:
            return None
        await self._commit(agent, job_id, None, job)
        log.info("job_deleted", agent=agent, job_id=job_id)
        return job

    async def delete_chat(self, key: SessionKey) -> int:
        """Remove every job of one chat (its session was deleted); returns how many."""
        await self.sync(key.agent)
        doomed = self.for_chat(key)
        if doomed:
            await self._remove(key.agent, doomed)
            log.info("chat_jobs_deleted", session_key=str(key), jobs=len(doomed))
        return len(doomed)

    async def delete_created_by(self, agent: str, channel: str, sender_id: str, key: SessionKey | None = None) -> int:
        """Remove the jobs one person created with `agent` on `channel` (only in `key`'s chat when given), for
        "forget me"; returns how many."""
        await self.sync(agent)
        doomed = [
            j
            for j in self.for_agent(agent)
            if j.channel == channel and j.created_by == sender_id and (key is None or j.key == key)
        ]
        if doomed:
            await self._remove(agent, doomed)
            log.info("person_jobs_deleted", agent=agent, jobs=len(doomed))
        return len(doomed)

    async def _commit(
        self, agent: str, job_id: str, new: Job | None, old: Job | None, *, guarded: bool = False
    ) -> None:
        """Make `new` (None: no job) current and durable; if the write fails, `old` is put back and it raises.
        `guarded`: the store takes `new` only while it holds `old`'s due time; otherwise the agent's jobs are
        reloaded and it raises JobConflictError."""
        self._set(agent, job_id, new)
        try:
            async with self._store_write():
                taken = await self._write(agent, job_id, new, old if guarded else None)
        except BaseException:
            self._put_back(agent, job_id, new, old)
            raise
        if not taken:
            self._put_back(agent, job_id, new, old)
            await self.refresh(agent, always=True)
            raise JobConflictError(
                f"job {job_id!r} ran or was changed meanwhile; read it again (action 'list') and redo the change"
            )

    async def _write(self, agent: str, job_id: str, new: Job | None, read: Job | None) -> bool:
        """Store `new` (None: remove the job); with `read`, only over the job stored with `read`'s due time."""
        if new is None:
            await self.store.remove(agent, [job_id])
            return True
        if read is None:
            await self.store.put(document(new))
            return True
        return await self.store.put_if(document(new), read.next_due)

    def _put_back(self, agent: str, job_id: str, new: Job | None, old: Job | None) -> None:
        if self._by_agent.get(agent, {}).get(job_id) is new:  # nothing fired or changed it meanwhile
            self._set(agent, job_id, old)

    async def _remove(self, agent: str, doomed: list[Job]) -> None:
        for job in doomed:
            self._set(job.agent, job.id, None)
        async with self._store_write():
            await self.store.remove(agent, [job.id for job in doomed])

    def _set(self, agent: str, job_id: str, job: Job | None) -> None:
        if job is None:
            self._by_agent.get(agent, {}).pop(job_id, None)
            self._live.pop((agent, job_id), None)
        else:
            self._put(job)

    # ---- the loop ------------------------------------------------------------------------------

    def _put(self, job: Job) -> None:
        self._by_agent.setdefault(job.agent, {})[job.id] = job
        self._live.pop((job.agent, job.id), None)  # whatever entry it had is stale now
        if job.next_due is not None:
            seq = self._live[(job.agent, job.id)] = next(self._seq)
            heapq.heappush(self._heap, (job.next_due, seq, job.agent, job.id))
            if self._heap[0][1] == seq:  # earlier than what the loop sleeps for
                self._wake.set()

    def _current(self, entry: tuple[float, int, str, str]) -> Job | None:
        """The job of a heap entry, or None when the entry is stale (the job was deleted, moved or updated)."""
        _, seq, agent, job_id = entry
        if self._live.get((agent, job_id)) != seq:
            return None
        return self._by_agent.get(agent, {}).get(job_id)

    def next_due(self) -> float | None:
        """The earliest due time of any job (stale heap entries dropped on the way)."""
        while self._heap and self._current(self._heap[0]) is None:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def _pop_due(self, now: float) -> list[Job]:
        due: list[Job] = []
        while (first := self.next_due()) is not None and first <= now:
            entry = heapq.heappop(self._heap)
            job = self._current(entry)
            if job is not None:
                del self._live[(job.agent, job.id)]
                due.append(job)
        return due

    async def _loop(self) -> None:
        while True:
            due = self._pop_due(self.clock())
            if due:
                try:
                    await self._handle_due(due)
                except Exception:  # the disk refused the record: those runs are skipped, later ones still fire
                    log.exception("job_record_failed", jobs=[j.id for j in due])
                continue
            self._wake.clear()
            await self._sleep(self.next_due())

    async def _sleep(self, deadline: float | None) -> None:
        waits: list[asyncio.Future[object]] = [asyncio.ensure_future(self._wake.wait())]
        if deadline is not None:
            waits.append(asyncio.ensure_future(sleep_until(self.clock, deadline)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

    async def _handle_due(self, due: list[Job]) -> None:
        """Record every due job (guarded by its stored due time), then hand the ones on time that this instance
        recorded to `fire`. A job whose record was refused was recorded or changed elsewhere: it is reloaded."""
        now = self.clock()
        to_fire: list[tuple[Job, float]] = []
        records: list[FireRecord] = []
        for job in due:
            assert job.next_due is not None
            # catch-up applies to runs missed while the daemon was down; one due since start runs however late
            run_at = job.next_due if job.next_due >= self._started_at else self._latest_missed(job, now)
            on_time = run_at is not None
            if run_at is None or run_at != job.next_due:  # the runs before the one fired are skipped
                self.skipped += 1
                log.warning("job_missed", agent=job.agent, job_id=job.id, due=job.next_due, late_s=now - job.next_due)
            if run_at is not None:
                to_fire.append((job, run_at))
            after = self._advance(job, now, ran=on_time)
            records.append(FireRecord(job.agent, job.id, job.next_due, None if after is None else document(after)))
        async with self._store_write():
            recorded = await self.store.record_fires(records)
        lost = {(r.agent, r.job_id) for r, done in zip(records, recorded, strict=True) if not done}
        for job, due_at in to_fire:
            if (job.agent, job.id) not in lost:
                self._spawn(job, due_at)
        for agent in {agent for agent, _ in lost}:
            # recorded elsewhere, changed, or (files) a record the disk refused earlier left memory ahead of it
            log.info("job_fire_not_recorded", agent=agent, jobs=sorted(j for a, j in lost if a == agent))
            await self.refresh(agent, always=True)

    def _latest_missed(self, job: Job, now: float) -> float | None:
        """Of the runs missed while the daemon was down, the latest at or before `now` if it is within
        `catch_up_s` (the only one that runs), else None."""
        assert job.next_due is not None
        window_start = now - self.config.catch_up_s
        latest: float | None = job.next_due if job.next_due >= window_start else None
        candidate = job.next_after(max(job.next_due, window_start - 1e-3)) if job.recurring else None
        while candidate is not None and candidate <= now:
            latest = candidate
            candidate = job.next_after(candidate)
        return latest

    def _advance(self, job: Job, now: float, *, ran: bool) -> Job | None:
        """The job as it is after this due time (None: a one-off that is done), made current in memory."""
        assert job.next_due is not None
        following = job.next_after(max(now, job.next_due)) if job.recurring else None
        if following is None:
            self._set(job.agent, job.id, None)
            return None
        advanced = replace(job, next_due=following, last_due=job.next_due, runs=job.runs + int(ran))
        self._put(advanced)
        return advanced

    def _spawn(self, job: Job, due: float) -> None:
        self.fired += 1
        task = asyncio.create_task(self._run(job, due), name=f"job:{job.agent}:{job.id}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, job: Job, due: float) -> None:
        assert self._fire is not None
        log.info("job_fired", agent=job.agent, job_id=job.id, due=due, late_s=round(self.clock() - due, 3))
        try:
            await self._fire(job, due)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job_failed", agent=job.agent, job_id=job.id)


def _order(job: Job) -> tuple[float, float]:
    return (job.next_due if job.next_due is not None else float("inf"), job.created_at)


def _jobs_of(documents: Iterable[JobDocument]) -> list[Job]:
    """The stored jobs that read as jobs; a damaged one is logged and left out (the others still load)."""
    jobs = []
    for doc in documents:
        try:
            data = jsonsafe.loads(doc.text)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            jobs.append(Job.from_json(data))
        except ValueError as e:  # JobError and CronError included
            log.error("job_unreadable", agent=doc.agent, job_id=doc.job_id[:40], reason=str(e)[:200])
    return jobs
