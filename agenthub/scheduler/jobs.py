"""A scheduled job (one-off or cron, fixed text or a prompt) and the checks that turn the model's input into one."""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import secrets
from dataclasses import dataclass, field, fields, replace
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agenthub.jsonsafe import utf8_dumps
from agenthub.scheduler.cron import CronError, CronSpec, parse_cron
from agenthub.session_keys import SessionKey, session_key

MAX_CONTENT_CHARS = 4000
MINUTES_PER_DAY = 24 * 60


class JobError(ValueError):
    """Input that cannot become a job; the message is meant for the model (or the user) and says what to fix."""


class JobConflictError(JobError):
    """A change made from a job that has run or changed since it was read (on any instance); the job as stored now
    has been reloaded: read it again and redo the change."""


@dataclass(frozen=True)
class Job:
    """One job of one chat. `next_due` is None once a one-off has run; `last_due` is the due time last recorded."""

    id: str
    agent: str
    channel: str
    chat_id: str
    timezone: str
    created_at: float
    created_by: str = ""
    """The sender who made the job: a prompt job's turn runs on their behalf (their profile, their chat memory)."""
    chat_type: str | None = None
    """`private` / `group` as the chat was when the job was made (None: unknown, read as a group)."""
    cred_id: str | None = None
    at: float | None = None
    cron: str | None = None
    text: str | None = None
    prompt: str | None = None
    next_due: float | None = None
    last_due: float | None = None
    runs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> SessionKey:
        return session_key(self.agent, self.channel, self.chat_id)

    @property
    def recurring(self) -> bool:
        return self.cron is not None

    def next_after(self, moment: float) -> float | None:
        """The job's first due time strictly after `moment`; None for a one-off."""
        if self.cron is None:
            return None
        after = dt.datetime.fromtimestamp(moment, dt.UTC)
        return parse_cron(self.cron).next_after(after, ZoneInfo(self.timezone)).timestamp()

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in _FIELD_NAMES}  # not asdict(): no deep copy, 10x faster
        return {k: v for k, v in data.items() if v is not None and v != {}}

    @functools.cached_property
    def json_text(self) -> str:
        """`to_json()` encoded once per job version (a job is immutable): a rewrite of the file re-encodes only
        the jobs that changed."""
        return utf8_dumps(self.to_json(), compact=True)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        """A stored job; `ValueError` when a field is missing or of the wrong type (a damaged file)."""
        try:
            job = cls(**{k: v for k, v in data.items() if k in _FIELD_NAMES})
        except TypeError:
            raise ValueError("a stored job lacks required fields") from None
        job.check_types()
        return job

    def check_types(self) -> None:
        texts = (self.id, self.agent, self.channel, self.chat_id, self.timezone, self.created_by)
        optional_texts = (self.chat_type, self.cred_id, self.cron, self.text, self.prompt)
        numbers = (self.created_at, *(n for n in (self.at, self.next_due, self.last_due) if n is not None))
        if (
            not all(isinstance(t, str) for t in texts)
            or not all(t is None or isinstance(t, str) for t in optional_texts)
            or not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers)
            or not isinstance(self.runs, int)
        ):
            raise ValueError(f"stored job {self.id!r} has a field of the wrong type")
        zone(self.timezone)
        if self.cron is not None:
            parse_cron(self.cron)

    def describe(self) -> str:
        """One line for listings: id, when, what."""
        when = f"cron '{self.cron}'" if self.cron else "once"
        nxt = f", next {local_iso(self.next_due, self.timezone)}" if self.next_due is not None else ", done"
        what = f"prompt: {self.prompt}" if self.prompt is not None else f"text: {self.text}"
        return f"{self.id}: {when} ({self.timezone}){nxt}; {_short(what)}"


_FIELD_NAMES = tuple(f.name for f in fields(Job))


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def local_iso(moment: float, timezone: str) -> str:
    return dt.datetime.fromtimestamp(moment, ZoneInfo(timezone)).isoformat(timespec="minutes")


def new_job_id() -> str:
    return secrets.token_hex(4)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder of the database ("America")
        raise JobError(f"unknown timezone {name!r}; use an IANA name such as 'Asia/Shanghai'") from None


def parse_at(text: str, timezone: str, now: float) -> float:
    """An ISO 8601 time (local to `timezone` when it has no offset) that lies in the future."""
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise JobError(f"'at' {text!r} is not an ISO 8601 time such as '2026-12-02T09:00:00'") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(timezone))
    when = moment.timestamp()
    if when <= now:
        raise JobError(f"'at' {text!r} is in the past; it is now {local_iso(now, timezone)} in {timezone}")
    return when


def check_cron(expression: str, timezone: str, now: float, min_interval_s: float) -> float:
    """Validate a cron expression in `timezone`; return its first due time after `now`."""
    try:
        spec = parse_cron(expression)
        first = spec.next_after(dt.datetime.fromtimestamp(now, dt.UTC), zone(timezone))
    except CronError as e:
        raise JobError(str(e)) from None
    if shortest_gap_s(spec) < min_interval_s:
        raise JobError(f"cron {expression!r} runs more often than every {int(min_interval_s)} seconds")
    return first.timestamp()


def shortest_gap_s(spec: CronSpec) -> float:
    """The shortest wall-clock gap between two runs: every gap of one day's minute/hour pattern and the one across
    midnight (as if the next day matched too: the safe side for day and weekday fields)."""
    minutes = sorted(h * 60 + m for h in spec.hours for m in spec.minutes)
    gaps = [b - a for a, b in itertools.pairwise(minutes)]
    gaps.append(minutes[0] + MINUTES_PER_DAY - minutes[-1])
    return min(gaps) * 60.0


@dataclass(frozen=True)
class JobChanges:
    """What the model asked for: any of a time, a cron expression, a timezone, a text or a prompt."""

    at: str | None = None
    cron: str | None = None
    timezone: str | None = None
    text: str | None = None
    prompt: str | None = None

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> JobChanges:
        values: dict[str, str | None] = {}
        for name in ("at", "cron", "timezone", "text", "prompt"):
            value = args.get(name)
            if value is not None and not isinstance(value, str):
                raise JobError(f"'{name}' must be a string")
            values[name] = value.strip() if isinstance(value, str) and value.strip() else None
        changes = cls(**values)
        if changes.at and changes.cron:
            raise JobError("give either 'at' (one-off) or 'cron' (recurring), not both")
        if changes.text and changes.prompt:
            raise JobError("give either 'text' (sent as is) or 'prompt' (run by the agent), not both")
        for content in (changes.text, changes.prompt):
            if content is not None and len(content) > MAX_CONTENT_CHARS:
                raise JobError(f"the job's text is over {MAX_CONTENT_CHARS} characters")
        return changes


def build_job(changes: JobChanges, base: Job, now: float, min_interval_s: float) -> Job:
    """`base` with `changes` applied and its next due time computed; raises `JobError` on anything invalid."""
    timezone = changes.timezone or base.timezone
    zone(timezone)
    at, cron = base.at, base.cron
    if changes.at is not None:
        at, cron = None, None
    if changes.cron is not None:
        at, cron = None, changes.cron
    text, prompt = base.text, base.prompt
    if changes.text is not None:
        text, prompt = changes.text, None
    if changes.prompt is not None:
        text, prompt = None, changes.prompt
    if text is None and prompt is None:
        raise JobError("a job needs 'text' (sent as is) or 'prompt' (run by the agent at the due time)")
    if changes.at is not None:
        at = parse_at(changes.at, timezone, now)
        return replace(base, timezone=timezone, at=at, cron=None, text=text, prompt=prompt, next_due=at)
    if cron is not None:
        first = check_cron(cron, timezone, now, min_interval_s)
        return replace(base, timezone=timezone, at=None, cron=cron, text=text, prompt=prompt, next_due=first)
    if at is None:
        raise JobError("a job needs 'at' (ISO 8601 time, one-off) or 'cron' (5 fields, recurring)")
    if at <= now:
        raise JobError("this one-off job has already run; create a new one")
    if timezone != base.timezone:  # the same wall-clock time, in the new zone
        at = same_wall_clock(at, base.timezone, timezone)
        if at <= now:
            raise JobError(
                f"{local_iso(at, timezone)} in {timezone} is in the past; it is now {local_iso(now, timezone)} there"
            )
    return replace(base, timezone=timezone, at=at, text=text, prompt=prompt, next_due=at)


def same_wall_clock(moment: float, old_zone: str, new_zone: str) -> float:
    """The moment whose wall-clock time in `new_zone` is `moment`'s in `old_zone`."""
    wall = dt.datetime.fromtimestamp(moment, zone(old_zone)).replace(tzinfo=None)
    return wall.replace(tzinfo=zone(new_zone)).timestamp()
