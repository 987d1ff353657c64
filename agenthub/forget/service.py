"""The Forgetter: one person's messages, replies, summaries, profile and memory lines, in one chat or in every
chat of a channel. Each session is redacted under the caller's guard (inside the daemon, the session's
serialisation); every file change is an atomic replace or an unlink, every memory file change one step of the
memory store (`MemoryWriter`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import structlog

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.config import Settings
from agenthub.forget.index import IndexHook, drop_derived_index
from agenthub.forget.redact import Markers, Person, involves, other_senders, redact, scrub_quotes, their_texts
from agenthub.forget.scrub import QuoteMatcher
from agenthub.media.drop_folder import stored_media_paths
from agenthub.media.names import chat_folders, inbox_dir, relative_to_workspace, remove_chat_folder
from agenthub.memory.files import MemoryFiles
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from agenthub.storage import jsonl
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.meta import DEFAULT_TITLE, title_from

log = structlog.get_logger(__name__)

TERMINAL_CHANNELS = frozenset({"cli", "http"})
"""Where terminal users' messages are: `agenthub chat` talks in `http` sessions (in `cli` ones before)."""
CLI_LINE_HISTORY = Path(".channels", "cli", "history")
"""Where `agenthub chat` keeps the REPL's line history by default (`[channels.cli] history_file` moves it)."""

SessionGuard = Callable[[SessionKey], AbstractAsyncContextManager[None]]
MemoryExclusion = Callable[[Sequence[str]], AbstractAsyncContextManager[None]]
"""Held for a whole forget, with the names of the agents it covers (inside the daemon: no memory rewrite from
material read before the forget ended is written, `MemoryProcessor.forgetting`)."""
JobsHook = Callable[[str, Person, SessionKey | None], Awaitable[int]]
"""(agent, person, the chat or None for every chat) → how many of the jobs the person created were dropped."""
UsageHook = Callable[[Person, Sequence[str], SessionKey | None], Awaitable[int]]
"""(person, agents, the chat or None for every chat) → how many usage rows had their name replaced by their tag."""


@contextlib.asynccontextmanager
async def unguarded(_: SessionKey) -> AsyncIterator[None]:
    """For a process that holds the data directory's lock itself (no daemon, no turns running)."""
    yield


@contextlib.asynccontextmanager
async def no_memory_writers(_: Sequence[str]) -> AsyncIterator[None]:
    """For a process without an L3 processor (the data directory's lock keeps the daemon out)."""
    yield


@dataclass
class ForgetReport:
    """What was removed (counts only: the audit line and the replies never carry content)."""

    sessions: int = 0
    messages: int = 0
    replies: int = 0
    summaries: int = 0
    profiles: int = 0
    memory_files: int = 0
    memory_lines: int = 0
    indexes: int = 0
    inbox_files: int = 0
    quoted_lines: int = 0
    """Lines of other people's messages and replies that quoted them, replaced by the marker."""
    usage_rows: int = 0
    """Usage rows (model calls, day roll-ups) that named them, now naming their tag (the tokens stay)."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class _SessionOutcome:
    key: SessionKey
    texts: list[str] = field(default_factory=list)
    private: bool = False


class Forgetter:
    def __init__(
        self,
        settings: Settings,
        history: SessionHistory,
        memory_files: MemoryFiles,
        *,
        guard: SessionGuard = unguarded,
        index: IndexHook | None = None,
        exclusive: MemoryExclusion = no_memory_writers,
        jobs: JobsHook | None = None,
        settled: Callable[[], Awaitable[None]] | None = None,
        usage: UsageHook | None = None,
        kept: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.history = history
        self.files = memory_files
        self.guard = guard
        self.exclusive = exclusive
        self.jobs = jobs
        """Drops the jobs the person created (with an agent, in one chat or everywhere); None: no scheduler."""
        self.index: IndexHook = index or functools.partial(drop_derived_index, settings.data_dir)
        self.settled = settled
        """Drops what the durable inbox keeps of answered messages (their text is the person's too)."""
        self.usage = usage
        """Redacts the person's name in the usage rows; None: no usage store (nothing recorded)."""
        self.kept = kept
        """Drops what the process keeps in memory made of memory files and messages (prompt parts); None: none."""

    async def forget_in_chat(self, agent: AgentDefinition, key: SessionKey, person: Person) -> ForgetReport:
        """`/forget`: the person's messages in this chat and their profile with this agent."""
        report = ForgetReport()
        async with self.exclusive([agent.name]):
            outcome = await self._forget_session(agent, key, person, report)
            outcomes = [outcome] if outcome is not None else []
            await self._forget_memory(agent, person, outcomes, report)
            await self._scrub_shared_profile([t for o in outcomes for t in o.texts], report)
        await self._forget_jobs(agent, person, key)
        await self._forget_usage(person, [agent.name], key, report)
        await self._drop_settled()
        audit("chat", person, "self", [agent.name], report)
        return report

    async def forget_everywhere(self, agents: Sequence[AgentDefinition], person: Person, *, actor: str) -> ForgetReport:
        """`agenthub forget` / the admin route: every chat of `agents` on the person's channel."""
        report = ForgetReport()
        async with self.exclusive([a.name for a in agents]):
            await self._forget_agents(agents, person, report)
        await self._forget_usage(person, [a.name for a in agents], None, report)
        await self._drop_settled()
        audit("everywhere", person, actor, [a.name for a in agents], report)
        return report

    async def _forget_usage(
        self, person: Person, agents: Sequence[str], key: SessionKey | None, report: ForgetReport
    ) -> None:
        if self.usage is not None:
            report.usage_rows += await self.usage(person, agents, key)

    async def _drop_settled(self) -> None:
        if self.kept is not None:
            self.kept()
        if self.settled is not None:
            await self.settled()

    async def _forget_agents(self, agents: Sequence[AgentDefinition], person: Person, report: ForgetReport) -> None:
        texts: list[str] = []
        for agent in agents:
            outcomes = []
            for key in await self._session_keys(agent.name, person.channel):
                outcome = await self._forget_session(agent, key, person, report)
                if outcome is not None:
                    outcomes.append(outcome)
            await self._forget_memory(agent, person, outcomes, report)
            await self._forget_jobs(agent, person, None)
            texts += [t for o in outcomes for t in o.texts]
        await self._scrub_shared_profile(texts, report)
        if person.channel in TERMINAL_CHANNELS:  # the terminal's line history holds every line typed at the prompt
            report.memory_lines += await _scrub_line_history(self.settings.data_dir / CLI_LINE_HISTORY, texts)

    # ---- sessions ------------------------------------------------------------------------------

    async def _session_keys(self, agent: str, channel: str) -> list[SessionKey]:
        """Every session of `agent` on `channel` the history's store keeps anything of (PostgreSQL: the shared one),
        an archive left without a history included."""
        return sorted((k for k in await self.history.store.keys_with_anything(agent) if k.channel == channel), key=str)

    async def _forget_session(
        self, agent: AgentDefinition, key: SessionKey, person: Person, report: ForgetReport
    ) -> _SessionOutcome | None:
        """Redact the archive, then the working history (no re-archiving), under the session's guard."""
        locale = i18n.locale_for(self.settings, key.channel, agent)
        markers = Markers(i18n.text("forget.redacted_message", locale), i18n.text("forget.redacted_reply", locale))
        async with self.guard(key):
            working = await self.history.load(key)
            archived = await self.history.archived(key)
            if not (involves(working, person) or involves(archived, person)):
                return None
            outcome = _SessionOutcome(key, private=not other_senders([*archived, *working], person))
            theirs = _media_of([r for r in [*archived, *working] if person.wrote(r)])
            quoting = QuoteMatcher(their_texts([*archived, *working], person))
            remaining: list[dict[str, Any]] = []

            def redacted(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
                done = redact(records, person, markers, drop_summaries=True)
                _count(report, done.messages, done.replies, done.summaries)
                outcome.texts += done.texts
                scrubbed, lines = scrub_quotes(done.records, quoting, markers.message)
                report.quoted_lines += lines
                remaining.extend(scrubbed)
                return scrubbed

            await self.history.rewrite_archive(key, redacted)
            new_working = redacted(working)
            if new_working != working:
                await self.history.replace(key, new_working, archive_removed=False)
            await self._retitle(key, outcome.texts)
            report.inbox_files += await self._delete_inbox_files(key, theirs - _media_of(remaining))
        report.sessions += 1
        return outcome

    async def _delete_inbox_files(self, key: SessionKey, paths: set[str]) -> int:
        """The chat's inbox files only their messages referred to (a picture another member sent too stays: images
        are stored once by content). A path outside the chat's own inbox folder is never touched."""
        inbox = inbox_dir(self.settings.workspace_dir / key.agent, key)
        names = {PurePosixPath(p).name for p in paths}
        files = [inbox / n for n in sorted(names) if n and relative_to_workspace(key, n) in paths]
        gone = await asyncio.to_thread(lambda: [jsonl.delete_file(f) for f in files])
        return sum(gone)

    async def _retitle(self, key: SessionKey, texts: list[str]) -> None:
        """A title made from one of their messages goes back to the default (the next message names it again)."""
        meta = await self.history.get_meta(key)
        if meta is None or meta.title == DEFAULT_TITLE:
            return
        if any(meta.title == title_from(t) for t in texts) or QuoteMatcher(texts).quotes(meta.title):
            await self.history.update_meta(key, title=DEFAULT_TITLE)

    # ---- memory files --------------------------------------------------------------------------

    async def _forget_memory(
        self, agent: AgentDefinition, person: Person, outcomes: list[_SessionOutcome], report: ForgetReport
    ) -> None:
        """Their profile with this agent and the memory files of their private chats go; the agent's and the
        group chats' memory files lose the lines that quote them; the search index is told."""
        for profile in await profile_names(self.files, agent, person):
            report.profiles += await self.files.writer.delete(profile)
        matcher = QuoteMatcher(t for o in outcomes for t in o.texts)
        for outcome in outcomes:
            name = MemoryName.chat_memory(outcome.key)  # the chat's own file, whatever the agent's current scope
            if outcome.private:  # with the files the chat sent and the large tool results it got
                report.memory_files += await self.files.writer.delete(name)
                for folder in chat_folders(self.settings.workspace_dir / agent.name, outcome.key):
                    await asyncio.to_thread(remove_chat_folder, folder)
            else:
                report.memory_lines += await self._scrub(_with_backup(name), matcher)
        report.memory_lines += await self._scrub(_with_backup(MemoryName.agent_memory(agent.name)), matcher)
        report.indexes += await self.index(agent.name, [o.key for o in outcomes])

    async def _forget_jobs(self, agent: AgentDefinition, person: Person, key: SessionKey | None) -> None:
        if self.jobs is not None:
            await self.jobs(agent.name, person, key)

    async def _scrub_shared_profile(self, texts: list[str], report: ForgetReport) -> None:
        report.memory_lines += await self._scrub(_with_backup(MemoryName.shared_profile()), QuoteMatcher(texts))

    async def _scrub(self, names: list[MemoryName], matcher: QuoteMatcher) -> int:
        """Remove quoting lines, each file in one step of the store (never racing write_memory or L3)."""
        if not matcher:
            return 0
        removed = 0
        for name in names:
            scrubbed = _Scrub(matcher)
            await self.files.writer.update(name, scrubbed)
            removed += scrubbed.lines
        return removed


class _Scrub:
    """A file's change: its lines quoting the person go; `lines` counts them."""

    def __init__(self, matcher: QuoteMatcher) -> None:
        self.matcher, self.lines = matcher, 0

    def __call__(self, text: str) -> str:
        scrubbed, self.lines = self.matcher.scrub(text)
        return scrubbed if self.lines else text


async def _scrub_line_history(path: Path, texts: list[str]) -> int:
    """The terminal's line history (a plain file, never a memory file) loses the lines quoting `texts`."""
    matcher = QuoteMatcher(texts)
    if not matcher:
        return 0
    text, lines = matcher.scrub(await asyncio.to_thread(_read_or_empty, path))
    if lines:
        await asyncio.to_thread(atomic_write_text, path, text)
    return lines


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


async def profile_names(files: MemoryFiles, agent: AgentDefinition, person: Person) -> list[MemoryName]:
    """Every profile of the person's own with `agent` on their channel (private and each group's, whatever the
    agent's current profile option, so a profile written before the option changed is found too). The shared USER.md
    is everybody's: it only loses the lines quoting them."""
    return await files.person_profiles(agent, person.channel, person.sender_id)


def _media_of(records: list[dict[str, Any]]) -> set[str]:
    return {p for r in records if r.get("role") == "user" for p in stored_media_paths(r.get("content"))}


def _with_backup(name: MemoryName) -> list[MemoryName]:
    return [name, name.backup_name()]


def _count(report: ForgetReport, messages: int, replies: int, summaries: int) -> None:
    report.messages += messages
    report.replies += replies
    report.summaries += summaries


def audit(scope: str, person: Person, actor: str, agents: list[str], report: ForgetReport) -> None:
    """The one audit line: who asked, which person (as its tag), where, how much; never any content."""
    log.info(
        "forget_audit", scope=scope, actor=actor, person=person.tag, channel=person.channel, agents=agents,
        **report.as_dict(),
    )  # fmt: skip
