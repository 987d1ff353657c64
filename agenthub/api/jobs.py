"""Admin routes for an agent's scheduled jobs: list them, delete one."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agenthub.api.errors import ApiError
from agenthub.api.host import ApiServices
from agenthub.api.requests import agent_of
from agenthub.jsonsafe import utf8_dumps
from agenthub.scheduler.core import Scheduler
from agenthub.scheduler.jobs import Job, local_iso


def _scheduler(api: ApiServices) -> Scheduler:
    if api.scheduler is None:
        raise ApiError(404, "scheduler_disabled", "scheduled jobs are turned off ([scheduler] enabled = false)")
    return api.scheduler


def job_json(job: Job) -> dict[str, Any]:
    data = job.to_json()
    if job.next_due is not None:
        data["next_due_local"] = local_iso(job.next_due, job.timezone)
    return data


async def list_jobs(api: ApiServices, request: web.Request) -> web.Response:
    """`GET /api/agents/{agent}/jobs`: every job of the agent, next due first."""
    gateway = api.host
    agent = agent_of(request, gateway)
    scheduler = _scheduler(api)
    await scheduler.sync(agent.name)  # the jobs as stored now, whichever instance changed them
    return web.json_response(
        {"jobs": [job_json(j) for j in scheduler.for_agent(agent.name)]},
        dumps=utf8_dumps,
    )


async def delete_job(api: ApiServices, request: web.Request) -> web.Response:
    """`DELETE /api/agents/{agent}/jobs/{job_id}` → 204, or 404 when the agent has no such job."""
    gateway = api.host
    agent = agent_of(request, gateway)
    job_id = request.match_info["job_id"]
    if await _scheduler(api).delete(agent.name, job_id) is None:
        raise ApiError(404, "job_not_found", f"agent {agent.name!r} has no job {job_id!r}")
    return web.Response(status=204)
