"""`manage_cron_jobs`, a platform tool: create, list, update and delete the current chat's scheduled jobs."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import structlog

from agenthub.agent.tools import Tool, ToolContext, ToolError
from agenthub.errors import StorageError
from agenthub.scheduler.jobs import Job, JobChanges, JobConflictError, JobError, build_job, local_iso, new_job_id

if TYPE_CHECKING:
    from agenthub.scheduler.core import Scheduler

log = structlog.get_logger(__name__)

NAME = "manage_cron_jobs"
UPDATE_ATTEMPTS = 3
"""An update made from a job that ran meanwhile is redone on the job as stored now, at most this many times."""
DESCRIPTION = (
    "Create, list, update or delete scheduled jobs of this chat: one-off reminders ('at', ISO 8601, local to "
    "'timezone' when it has no offset) or recurring jobs ('cron', 5 fields: minute hour day month weekday). "
    "A job either sends 'text' as is, or runs 'prompt' through you at the due time and sends your answer. "
    "'timezone' is an IANA name; it defaults to the configured one. 'update' takes only what changes; a one-off "
    "moved to another timezone keeps its wall-clock time there."
)
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["create", "list", "update", "delete"]},
        "job_id": {"type": "string", "description": "the job to update or delete"},
        "at": {"type": "string", "description": "one-off due time, ISO 8601, e.g. 2026-12-02T09:00:00"},
        "cron": {"type": "string", "description": "recurring schedule, 5 fields, e.g. '0 9 * * 1-5'"},
        "timezone": {"type": "string", "description": "IANA timezone, e.g. Asia/Shanghai"},
        "text": {"type": "string", "description": "message sent as is when due"},
        "prompt": {"type": "string", "description": "instruction you run when due; your answer is sent"},
    },
    "required": ["action"],
}


def cron_jobs_tool(scheduler: Scheduler | None) -> Tool:
    """The platform tool over `scheduler` (None: scheduled jobs are off, and the tool says so when called)."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            return await manage_cron_jobs(scheduler, args, ctx)
        except JobError as e:
            raise ToolError(str(e)) from None
        except (OSError, StorageError) as e:  # the files, or the shared store (postgres) being away
            log.error("jobs_not_saved", error_type=type(e).__name__)
            raise ToolError("the jobs could not be read or saved (storage error); nothing was changed") from None

    return Tool(NAME, DESCRIPTION, INPUT_SCHEMA, run)


async def manage_cron_jobs(scheduler: Scheduler | None, args: dict[str, Any], ctx: ToolContext) -> str:
    """The tool's body; raises `JobError` with a message for the model when the input is wrong."""
    if scheduler is None:
        raise JobError("scheduled jobs are not available in this process")
    await scheduler.sync(ctx.key.agent)  # the jobs as stored now, whichever instance changed them
    action = args.get("action")
    if action == "list":
        return list_text(scheduler.for_chat(ctx.key))
    if action == "create":
        return await _create(args, ctx, scheduler)
    job_id = args.get("job_id")
    if not isinstance(job_id, str) or not job_id.strip():
        raise JobError(f"'{action}' needs the 'job_id' of one of this chat's jobs (see action 'list')")
    if action == "update":
        return await _update(job_id.strip(), args, ctx, scheduler)
    if action == "delete":
        return await _delete(job_id.strip(), ctx, scheduler)
    raise JobError("'action' must be one of create, list, update, delete")


async def _create(args: dict[str, Any], ctx: ToolContext, scheduler: Scheduler) -> str:
    key, now = ctx.key, scheduler.clock()
    base = Job(
        id=new_job_id(),
        agent=key.agent,
        channel=key.channel,
        chat_id=key.chat_id,
        timezone=scheduler.config.timezone,
        created_at=now,
        created_by=ctx.sender_id,
        chat_type=ctx.chat_type,
        cred_id=ctx.cred_id,
    )
    job = await scheduler.add(build_job(JobChanges.from_args(args), base, now, scheduler.config.min_interval_s))
    return f"created job {job.id}; {_next_text(job)}{_idle_note(scheduler)}"


async def _update(job_id: str, args: dict[str, Any], ctx: ToolContext, scheduler: Scheduler) -> str:
    changes = JobChanges.from_args(args)
    if changes.empty:
        raise JobError("nothing to change: give any of 'at', 'cron', 'timezone', 'text' or 'prompt'")
    for _ in range(UPDATE_ATTEMPTS - 1):
        with contextlib.suppress(JobConflictError):  # it ran or changed meanwhile, and was reloaded: redo it
            return await _update_once(job_id, changes, ctx, scheduler)
    return await _update_once(job_id, changes, ctx, scheduler)


async def _update_once(job_id: str, changes: JobChanges, ctx: ToolContext, scheduler: Scheduler) -> str:
    current = scheduler.get(ctx.key.agent, job_id, ctx.key)
    if current is None:
        raise JobError(f"no job {job_id!r} in this chat (see action 'list')")
    job = await scheduler.update(build_job(changes, current, scheduler.clock(), scheduler.config.min_interval_s))
    return f"updated job {job.id}; {_next_text(job)}{_idle_note(scheduler)}"


async def _delete(job_id: str, ctx: ToolContext, scheduler: Scheduler) -> str:
    job = await scheduler.delete(ctx.key.agent, job_id, ctx.key)
    if job is None:
        raise JobError(f"no job {job_id!r} in this chat (see action 'list')")
    return f"deleted job {job.id}"


def _idle_note(scheduler: Scheduler) -> str:
    """Said when nothing fires jobs here (a stand-alone `agenthub chat`), so the model does not promise a run."""
    if scheduler.running or scheduler.serving:
        return ""
    return (
        ". Note: jobs run only while `agenthub serve` runs, and it is not running here: this job fires at its time"
        " only if the daemon is running then"
    )


def _next_text(job: Job) -> str:
    assert job.next_due is not None
    return f"next run {local_iso(job.next_due, job.timezone)} ({job.timezone})"


def list_text(jobs: list[Job]) -> str:
    if not jobs:
        return "this chat has no scheduled jobs"
    return "\n".join(job.describe() for job in jobs)
