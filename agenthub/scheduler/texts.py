"""What the scheduler writes to chat users, in the chat's locale: `/jobs` listings, times, failure notices."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from agenthub import i18n
from agenthub.scheduler.jobs import Job

CONTENT_PREVIEW_CHARS = 60


def local_time(moment: float, timezone: str, locale: str, *, default_zone: str, now: float) -> str:
    """`12月2日 09:00` / `Dec 2 09:00` in the job's zone; the year when it is not this year's, the zone's name when
    it is not the chat's default."""
    tz = ZoneInfo(timezone)
    when = dt.datetime.fromtimestamp(moment, tz)
    parts = {
        "year": when.year,
        "month": i18n.text(f"jobs.month_{when.month}", locale),
        "day": when.day,
        "hm": when.strftime("%H:%M"),
    }
    same_year = when.year == dt.datetime.fromtimestamp(now, tz).year
    shown = i18n.text("jobs.date" if same_year else "jobs.date_year", locale, **parts)
    if timezone != default_zone:
        shown = i18n.text("jobs.date_zone", locale, when=shown, zone=timezone)
    return shown


def job_line(job: Job, locale: str, *, default_zone: str, now: float) -> str:
    """One job as a user reads it: id, once or recurring, the next run, and what it sends."""
    if job.next_due is None:
        head = i18n.text("jobs.item_done", locale, job_id=job.id)
    else:
        when = local_time(job.next_due, job.timezone, locale, default_zone=default_zone, now=now)
        key = "jobs.item_cron" if job.cron is not None else "jobs.item_once"
        head = i18n.text(key, locale, job_id=job.id, cron=job.cron, when=when)
    if job.prompt is not None:
        what = i18n.text("jobs.item_prompt", locale, content=_preview(job.prompt))
    else:
        what = i18n.text("jobs.item_text", locale, content=_preview(job.text or ""))
    return f"{head}\n    {what}"


def jobs_listing(jobs: list[Job], locale: str, *, default_zone: str, now: float) -> str:
    """The reply to `/jobs`."""
    if not jobs:
        return i18n.text("jobs.none", locale)
    lines = [i18n.text("jobs.list_header", locale, count=len(jobs))]
    lines += [job_line(job, locale, default_zone=default_zone, now=now) for job in jobs]
    lines.append(i18n.text("jobs.list_footer", locale))
    return "\n".join(lines)


def prompt_failed_notice(job: Job, following: float | None, locale: str, *, default_zone: str, now: float) -> str:
    """Told to the chat when a prompt job's turn failed (never the error's text)."""
    if following is None:
        return i18n.text("jobs.prompt_failed_once", locale, job_id=job.id)
    when = local_time(following, job.timezone, locale, default_zone=default_zone, now=now)
    return i18n.text("jobs.prompt_failed_recurring", locale, job_id=job.id, when=when)


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= CONTENT_PREVIEW_CHARS else flat[: CONTENT_PREVIEW_CHARS - 1] + "…"
