"""The scheduler: jobs in memory with a heap of due times, one task sleeping until the earliest (never a scan)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import replace

import structlog

from agenthub.clock import Clock, sleep_until, system_clock
from agenthub.config import SchedulerSettings
from agenthub.scheduler.jobs import Job, JobError
from agenthub.scheduler.store import JobStore
from agenthub.storage.keys import SessionKey

log = structlog.get_logger(__name__)

FireFn = Callable[[Job, float], Awaitable[None]]
"""Runs one due job (the job as it was when due, and the due time); the scheduler has recorded it already."""


class Scheduler:
    """Owns every agent's jobs. A due job is recorded durably (one-off removed, recurring advanced) BEFORE it is
    handed to `fire`, so a crash in between skips that run rather than sending it twice."""

    def __init__(self, config: SchedulerSettings, store: JobStore, *, clock: Clock = system_clock) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self._by_agent: dict[str, dict[str, Job]] = {}
        self._heap: list[tuple[float, int, str, str]] = []  # (due, seq, agent, job id); stale entries skipped
        self._live: dict[tuple[str, str], int] = {}  # (agent, job id) → the seq of its one valid heap entry
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._wanted: dict[str, int] = {}
        self._saved: dict[str, int] = {}
        self._save_locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task[None] | None = None
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
        self._fire = fire
        self._started_at = self.clock()
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="scheduler")
        log.info("scheduler_started", jobs=len(self))

    async def pause(self) -> None:
        """Fire nothing more; runs already handed to delivery go on."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

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
            for job in await self.store.load_all():
                self._put(job)
            self._loaded = True

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
        await self.ensure_loaded()
        limit = self.config.max_jobs_per_chat
        if len(self.for_chat(job.key)) >= limit:
            raise JobError(f"this chat already has {limit} jobs; delete one first")
        await self._commit(job.agent, job.id, job, None)
        log.info("job_created", agent=job.agent, job_id=job.id, cron=job.cron, next_due=job.next_due)
        return job

    async def update(self, job: Job) -> Job:
        await self.ensure_loaded()
        before = self.get(job.agent, job.id)
        if before is None:
            raise JobError(f"no job {job.id!r} in this chat")
        await self._commit(job.agent, job.id, job, before)
        log.info("job_updated", agent=job.agent, job_id=job.id, next_due=job.next_due)
        return job

    async def delete(self, agent: str, job_id: str, key: SessionKey | None = None) -> Job | None:
        """Remove a job (of `key`'s chat when given); its pending heap entry goes stale and is skipped."""
        await self.ensure_loaded()
        job = self.get(agent, job_id, key)
        if job is None:
            return None
        await self._commit(agent, job_id, None, job)
        log.info("job_deleted", agent=agent, job_id=job_id)
        return job

    async def delete_chat(self, key: SessionKey) -> int:
        """Remove every job of one chat (its session was deleted); returns how many."""
        await self.ensure_loaded()
        doomed = self.for_chat(key)
        for job in doomed:
            self._set(job.agent, job.id, None)
        if doomed:
            await self._persist(key.agent)
            log.info("chat_jobs_deleted", session_key=str(key), jobs=len(doomed))
        return len(doomed)

    async def delete_created_by(self, agent: str, channel: str, sender_id: str, key: SessionKey | None = None) -> int:
        """Remove the jobs one person created with `agent` on `channel` (only in `key`'s chat when given), for
        "forget me"; returns how many."""
        await self.ensure_loaded()
        doomed = [
            j
            for j in self.for_agent(agent)
            if j.channel == channel and j.created_by == sender_id and (key is None or j.key == key)
        ]
        for job in doomed:
            self._set(job.agent, job.id, None)
        if doomed:
            await self._persist(agent)
            log.info("person_jobs_deleted", agent=agent, jobs=len(doomed))
        return len(doomed)

    async def _commit(self, agent: str, job_id: str, new: Job | None, old: Job | None) -> None:
        """Make `new` (None: no job) current and durable; if the write fails, `old` is put back and it raises."""
        self._set(agent, job_id, new)
        try:
            await self._persist(agent)
        except BaseException:
            if self._by_agent.get(agent, {}).get(job_id) is new:  # nothing fired or changed it meanwhile
                self._set(agent, job_id, old)
            raise

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
        """Record every due job (one write per agent), then hand the ones on time to `fire`."""
        now = self.clock()
        to_fire: list[tuple[Job, float]] = []
        agents: set[str] = set()
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
            self._advance(job, now, ran=on_time)
            agents.add(job.agent)
        await asyncio.gather(*(self._persist(agent) for agent in agents))
        for job, due_at in to_fire:
            self._spawn(job, due_at)

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

    def _advance(self, job: Job, now: float, *, ran: bool) -> None:
        assert job.next_due is not None
        following = job.next_after(max(now, job.next_due)) if job.recurring else None
        if following is None:
            self._set(job.agent, job.id, None)
            return
        self._put(replace(job, next_due=following, last_due=job.next_due, runs=job.runs + int(ran)))

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

    async def _persist(self, agent: str) -> None:
        """Write the agent's jobs; callers that arrive while a write runs share the next one."""
        wanted = self._wanted[agent] = self._wanted.get(agent, 0) + 1
        lock = self._save_locks.setdefault(agent, asyncio.Lock())
        async with lock:
            if self._saved.get(agent, 0) >= wanted:
                return
            generation = self._wanted[agent]
            await self.store.save(agent, list(self._by_agent.get(agent, {}).values()))
            self._saved[agent] = generation


def _order(job: Job) -> tuple[float, float]:
    return (job.next_due if job.next_due is not None else float("inf"), job.created_at)
