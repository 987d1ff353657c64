"""L3 MemoryProcessor: every couple of hours, rewrite each active agent's MEMORY.md and the user profile(s).

Runs are serialised by `MemoryProcessor._run_lock` (held for a whole run, and only by runs): the timer's tick
and any manual trigger never overlap. Each file's read-merge-write takes that file's own lock
(`MemoryWriter`: one step of the store, atomic against every writer of every instance), never across a model
call, so a memory flush before a compaction or the write_memory tool
never waits for a run's model calls. A run's model calls go out in parallel (at most `MAX_PARALLEL_CALLS`);
each file is written when its own call succeeded, atomically, cut to its size cap first. A failed call or a
refused rewrite, or a read or write of the file that raises (a full or read-only disk, a refused path), leaves
only its own file as it was, and only that file is offered the material again next run
(`l3_material.L3State.retry`); the other files are written and their material is done. Each agent's material and
each kind of target is gathered on its own: one agent's broken directory (a planted link) stops only its files. A
forget (`MemoryProcessor.forgetting`) makes every rewrite of its agents' files whose material was read before it
ended stale: refused under the file's lock and retried next run, from the redacted material.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from agenthub.agent.context import cut_to_tokens
from agenthub.agent.definition import AgentDefinition
from agenthub.errors import AgentHubError
from agenthub.llm.models import context_window
from agenthub.llm.tokens import estimate_text_tokens
from agenthub.llm.types import CallOwner, LLMProvider, LLMRequest
from agenthub.memory import l3_material as material
from agenthub.memory import thresholds
from agenthub.memory.host import MemoryHost
from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName

log = structlog.get_logger(__name__)

WriteOutcome = Literal["written", "unchanged", "refused", "conflict", "stale"]
"""`refused`: the rewrite looked lossy; `conflict`: another writer replaced the file after it was read; `stale`: a
forget ran (or runs) since the material was read."""
NOT_TAKEN_IN = frozenset({"refused", "conflict", "stale", "failed"})
"""The outcomes of a target whose material is offered again next run (`failed`: the write raised)."""

MAX_PARALLEL_CALLS = 4
FLUSH_ATTEMPTS = 2
"""A flush whose file another writer (an L3 run) replaced meanwhile merges once more, into the new text."""
MIN_MATERIAL_TOKENS = 200
SHRINK_GUARD_CHARS = 1000
"""A file longer than this is never replaced by a rewrite shorter than `SHRINK_GUARD_RATIO` of it."""
SHRINK_GUARD_RATIO = 0.25
CUT_STOP_REASONS = frozenset({None, "max_tokens", "model_context_window_exceeded", "refusal"})

MEMORY_PROMPT = (
    "You maintain MEMORY.md, the long-term memory of the assistant agent {agent!r}. Rewrite the WHOLE file: "
    "merge the current file with the durable facts in the recent conversations (projects, decisions, agreed "
    "ways of working, recurring tasks, exact names and identifiers). Drop small talk, one-off details and "
    "anything superseded; never keep two contradicting statements. Put the most important facts first and, "
    "within a topic, the newest first. Stay under {cap} characters. Output only the file's Markdown."
)
USER_PROMPT = (
    "You maintain USER.md, the profile of {who} that an assistant reads before every conversation. Rewrite "
    "the WHOLE file: merge the current profile with what the recent conversations reveal (name, role, "
    "language, preferences, ongoing goals). Only facts about the person, no conversation summaries; drop "
    "what is superseded. Most important first. Stay under {cap} characters. Output only the file's Markdown."
)


class L3Error(AgentHubError):
    """One L3 call failed or gave an unusable answer."""


@dataclass
class Target:
    """One file to rewrite from one batch of material."""

    kind: Literal["memory", "user"]
    name: MemoryName
    label: str
    """How logs and the L3 state name the file (`MemoryFiles.label`)."""
    system: str
    material: str
    cap: int
    provider: LLMProvider
    model: str
    window: int | None = None
    """The model's context window when known: the request is fitted into it."""
    old: str = ""
    new: str = field(default="", repr=False)
    purpose: str = "l3"
    """The `llm_call` log's purpose: `l3` for the timer's rewrite, `flush` before a compaction."""
    agents: tuple[str, ...] = ()
    """Whose material this is: their L3 state records whether this file has taken it in."""
    forgets: Mapping[str, int] = field(default_factory=dict)
    """`MemoryProcessor.forgets_seen()` when the material was read: a forget since then makes it stale."""
    owner: CallOwner | None = None
    """Who the call is for in the usage records; None: the one agent of `agents` (none when several share it)."""


def cap_text(text: str, cap: int) -> str:
    """Keep whole lines from the top (the most important part) within `cap` characters."""
    if len(text) <= cap:
        return text
    kept: list[str] = []
    used = 0
    for line in text.splitlines():
        if used + len(line) + 1 > cap:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept).rstrip() + "\n" if kept else text[:cap]


def _clean_answer(text: str) -> str:
    body = text.strip()
    if body.startswith("```"):
        lines = body.splitlines()[1:]
        if lines and lines[-1].strip().startswith("```"):
            lines = lines[:-1]
        body = "\n".join(lines).strip()
    return body + "\n" if body else ""


class MemoryProcessor:
    """L3 for one host; `tick()` is the timer's job."""

    def __init__(self, host: MemoryHost) -> None:
        self.host = host
        self._run_lock = asyncio.Lock()  # serialises runs only; files have their own locks
        self._calls = asyncio.Semaphore(MAX_PARALLEL_CALLS)  # a run's calls; a flush never queues behind them
        self._forgets: Counter[str] = Counter()  # per agent: bumped when a forget starts and when it ends
        self._forgetting: Counter[str] = Counter()  # per agent: forgets running now
        self.runs = 0

    @contextlib.asynccontextmanager
    async def forgetting(self, agents: Iterable[str]) -> AsyncIterator[None]:
        """A forget of these agents' people runs: no rewrite from material read before it ends is written (an
        L3 run in flight, a flush), so nothing it removes is written back; those files retry next run."""
        names = list(agents)
        self._forgets.update(names)
        self._forgetting.update(names)
        try:
            yield
        finally:
            self._forgetting.subtract(names)
            self._forgets.update(names)

    def forgets_seen(self) -> dict[str, int]:
        return dict(self._forgets)

    def _stale(self, target: Target) -> bool:
        return any(self._forgetting[a] > 0 or self._forgets[a] != target.forgets.get(a, 0) for a in target.agents)

    async def tick(self) -> None:
        async with self._run_lock:
            await self._run()

    async def _run(self) -> None:
        host = self.host
        started, forgets = host.clock(), self.forgets_seen()
        collected = [await self._collect(agent) for agent in host.agents()]
        active = [c for c in collected if c is not None and c.sessions]
        targets = self._targets(active)
        for target in targets:
            target.forgets = forgets
        if not targets:  # nothing new for any file (a stale retry entry is dropped)
            for item in active:
                await self._record(item, started, [])
            log.info("l3_nothing_new")
            return
        online = [t for t in targets if not t.provider.offline]
        offline = [t for t in targets if t.provider.offline]
        if offline:
            log.info("l3_skipped_offline", files=[t.label for t in offline], retry="next run")
        if not online:
            return
        failed = offline + await self._rewrite(online)
        for item in active:
            await self._record(item, started, failed)
        self.runs += 1
        log.info("l3_run_done", agents=[c.agent.name for c in active], files=len(targets) - len(failed))

    async def _collect(self, agent: AgentDefinition) -> material.AgentMaterial | None:
        """One agent's material; None (logged) when its directory cannot be read: the other agents go on."""
        try:
            return await material.collect(self.host, agent)
        except (OSError, AgentHubError) as e:
            log.warning("l3_agent_unreadable", agent=agent.name, error_type=type(e).__name__, error=str(e))
            return None

    async def _rewrite(self, targets: list[Target]) -> list[Target]:
        """Call the model for every target in parallel and write each file that got a good answer; a failed call,
        a refused rewrite or a read or write that raises leaves only its own file as it was. Returns the targets
        that did not take their material in."""
        unreadable = [t for t in targets if not await self._read_old(t)]
        targets = [t for t in targets if t not in unreadable]
        results = await asyncio.gather(*(self._run_call(t) for t in targets), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result  # cancellation (or an interpreter exit) is never swallowed
        errors = [(t, r) for t, r in zip(targets, results, strict=True) if isinstance(r, Exception)]
        if errors:
            files = [t.label for t, _ in errors]
            log.warning("l3_run_failed", errors=[str(e) for _, e in errors], files=files, retry="next run")
        answered = [t for t, r in zip(targets, results, strict=True) if not isinstance(r, Exception)]
        refused = [t for t in answered if await self._write_or_fail(t) in NOT_TAKEN_IN]
        if refused:
            log.warning("l3_run_incomplete", refused=[t.label for t in refused], retry="next run")
        return unreadable + [t for t, _ in errors] + refused

    async def _read_old(self, target: Target) -> bool:
        """Read the file's current text into `target.old`; False (logged) when the read raises."""
        try:
            target.old = await self.host.memory_files.read(target.name)
        except (OSError, AgentHubError) as e:
            log.warning("l3_read_failed", file=target.label, error_type=type(e).__name__, error=str(e))
            return False
        return True

    async def _write_or_fail(self, target: Target) -> WriteOutcome | Literal["failed"]:
        """`_write`, with a write that raises (EACCES, EROFS, ENOSPC, a refused path) a failed target, logged."""
        try:
            return await self._write(target)
        except (OSError, AgentHubError) as e:
            log.warning("l3_write_failed", file=target.label, error_type=type(e).__name__, error=str(e))
            return "failed"

    async def _record(self, item: material.AgentMaterial, started: float, failed: list[Target]) -> None:
        """The agent's material is done for every file but the failed ones, which keep the watermark they had."""
        name, state = item.agent.name, item.state
        retry = {t.label: state.watermark(t.label) for t in failed if name in t.agents}
        try:
            await material.save_state(self.host.memory_files, item.agent, material.L3State(started, retry))
        except (OSError, AgentHubError) as e:  # the next run offers this agent's material again
            log.warning("l3_state_not_saved", agent=name, error_type=type(e).__name__, error=str(e))

    def _targets(self, active: list[material.AgentMaterial]) -> list[Target]:
        """The files with material they have not taken in yet (each file's own watermark decides); each agent's
        MEMORY and profile targets, and the shared profile's, are built on their own (`_built`)."""
        targets: list[Target] = []
        for item in active:
            targets += self._built("memory", item.agent.name, functools.partial(self._memory_targets, item))
            targets += self._built("user", item.agent.name, functools.partial(self._user_targets, item))
        targets += self._built("shared_user", None, lambda: _listed(self._shared_user_target(active)))
        return targets

    def _built(self, kind: str, agent: str | None, build: Callable[[], list[Target]]) -> list[Target]:
        """`build()`, or no targets (logged) when it raises: a refused path (a planted link) at one agent's file
        stops only that agent's files of that kind."""
        try:
            return build()
        except (OSError, AgentHubError) as e:
            log.warning("l3_targets_refused", kind=kind, agent=agent, error_type=type(e).__name__, error=str(e))
            return []

    def _memory_targets(self, item: material.AgentMaterial) -> list[Target]:
        host, memory, agent = self.host, self.host.settings.memory, item.agent
        provider, model = host.resolve_model(agent)
        window = thresholds.window_of(host.settings, agent, model)
        cap = memory.memory_max_chars
        system, files = MEMORY_PROMPT.format(agent=agent.name, cap=cap), host.memory_files
        return [
            Target("memory", name, label, system, batch.text, cap, provider, model, window, agents=(agent.name,))
            for name, batch in material.memory_batches(files, item).items()
            if batch.newest > item.state.watermark(label := files.label(name))
        ]

    def _user_targets(self, item: material.AgentMaterial) -> list[Target]:
        host, memory, agent = self.host, self.host.settings.memory, item.agent
        provider, model = host.resolve_model(agent)
        window = thresholds.window_of(host.settings, agent, model)
        who = "one person (the sender of the messages below)"
        cap = memory.user_max_chars
        prompt, files = USER_PROMPT.format(who=who, cap=cap), host.memory_files
        return [
            Target("user", name, label, prompt, batch.text, cap, provider, model, window, agents=(agent.name,))
            for name, batch in material.user_batches(files, item).items()
            if batch.newest > item.state.watermark(label := files.label(name))
        ]

    def _shared_user_target(self, items: list[material.AgentMaterial]) -> Target | None:
        """`auth/USER.md` from the chats that share it (`l3_material.shared_profile_sessions`) whose material it
        has not taken in yet."""
        host, memory = self.host, self.host.settings.memory
        name = host.memory_files.shared_profile
        label = host.memory_files.label(name)
        feeding: list[tuple[str, list[material.SessionMaterial]]] = []
        for item in items:
            sessions = material.shared_profile_sessions(host.memory_files, item)
            if sessions and max(s.changed_at for s in sessions) > item.state.watermark(label):
                feeding.append((item.agent.name, sessions))
        if not feeding:
            return None
        provider, model = host.resolve_model(None)
        prompt = USER_PROMPT.format(who="the user(s)", cap=memory.user_max_chars)
        clip = memory.l3_message_chars
        text = "\n\n".join(material.render_session(s, clip) for _, sessions in feeding for s in sessions)
        window = context_window(model, host.settings.llm.context_window)
        target = Target("user", name, label, prompt, text, memory.user_max_chars, provider, model, window)
        target.agents = tuple(name for name, _ in feeding)
        return target

    async def _run_call(self, target: Target) -> None:
        async with self._calls:
            await self._call(target)

    async def _call(self, target: Target) -> None:
        current = target.old.strip() or "(empty)"
        max_tokens, material = target.cap + 512, target.material
        if target.window is not None:  # fit a small window: a quarter for the answer, half for the input
            max_tokens = min(max_tokens, target.window // 4)
            room = target.window // 2 - estimate_text_tokens(current) - estimate_text_tokens(target.system)
            if room < MIN_MATERIAL_TOKENS:
                raise L3Error(f"{target.label} and new material do not fit the model's context window")
            material = cut_to_tokens(material, room)
        content = (
            f"<current-file>\n{current}\n</current-file>\n\n"
            f"<recent-conversations>\n{material}\n</recent-conversations>\n\nWrite the new file now."
        )
        request = LLMRequest(
            model=target.model,
            system=[{"type": "text", "text": target.system}],
            messages=[{"role": "user", "content": content}],
            tools=[],
            max_tokens=max_tokens,
            purpose=target.purpose,
            owner=target.owner or CallOwner(target.agents[0] if len(target.agents) == 1 else ""),
        )
        bound_s = self.host.settings.memory.background_timeout_s
        async with self.host.llm_gate:
            try:
                async with asyncio.timeout(bound_s):  # a hung model must not hold the run (or the file) forever
                    response = await target.provider.complete(request)
            except TimeoutError:
                raise L3Error(f"no answer for {target.label} within {bound_s:g} s") from None
        text = _clean_answer(response.text)
        if not text:
            raise L3Error(f"empty answer for {target.label}")
        if response.stop_reason in CUT_STOP_REASONS:
            raise L3Error(f"answer for {target.label} is incomplete (stop_reason={response.stop_reason})")
        target.new = text

    async def flush(self, key: SessionKey, agent: AgentDefinition, messages: list[dict[str, Any]]) -> bool:
        """Memory flush before compaction: merge the durable facts of `messages` (about to leave the working
        history) into the MEMORY.md this session reads, so they reach long-term memory before only a summary is
        left. One call, outside any lock (an L3 run does not hold it up); the write takes the file's lock.
        Raises on failure (the caller logs and compacts anyway). True when the file now holds them (written,
        or nothing to change); False when the rewrite was refused (e.g. another writer replaced the file)."""
        host, memory = self.host, self.host.settings.memory
        provider, model = host.resolve_model(agent)
        if provider.offline or not messages:
            return True
        session = material.SessionMaterial(key, messages)
        name = host.memory_files.memory_name(agent, key)
        target = Target(
            "memory",
            name,
            host.memory_files.label(name),
            MEMORY_PROMPT.format(agent=agent.name, cap=memory.memory_max_chars),
            material.render_session(session, memory.l3_message_chars),
            memory.memory_max_chars,
            provider,
            model,
            thresholds.window_of(host.settings, agent, model),
            purpose="flush",
            agents=(agent.name,),
            owner=CallOwner(agent.name, key.channel, key.chat_id),
            forgets=self.forgets_seen(),
        )
        for _ in range(FLUSH_ATTEMPTS):
            target.old = await host.memory_files.read(target.name)
            await self._call(target)
            outcome = await self._write(target)
            if outcome != "conflict":
                break
        log.info("memory_flushed", session_key=str(key), messages=len(messages), file=target.label, outcome=outcome)
        return outcome in ("written", "unchanged")

    async def _write(self, target: Target) -> WriteOutcome:
        """Atomic write within the cap, as one step of the store (`MemoryWriter.update`: on PostgreSQL safe against
        the writers of every instance): text another writer (the write_memory tool) appended since `target.old`
        was read is kept. The replaced version is kept as `<file>.bak`. Stale material (a forget since it was
        read) is never written. Runs to its end even when the caller is cancelled."""
        outcome: WriteOutcome = "unchanged"

        def merge(current: str) -> str:
            nonlocal outcome
            if self._stale(target):
                outcome = "stale"
                return current
            outcome, text = _merge(target, current)
            return text if outcome == "written" else current

        await self.host.memory_files.writer.update(target.name, merge, keep_backup=True)
        if outcome == "stale":
            log.warning("l3_material_stale", file=target.label, purpose=target.purpose, retry="next run")
        return outcome


def _listed(target: Target | None) -> list[Target]:
    return [target] if target is not None else []


def _merge(target: Target, current: str) -> tuple[WriteOutcome, str]:
    """What to write over `current`: the rewrite plus whatever was appended since `target.old`, capped.

    Refused: a rewrite that would shrink a long file to under a quarter (the model most likely lost facts), and
    one whose file another writer replaced meanwhile (its answer was written against a text that is gone).
    """
    text = target.new
    if current != target.old:
        if not current.startswith(target.old):
            log.warning("l3_file_changed_meanwhile", file=target.label, purpose=target.purpose)
            return "conflict", current
        text = text.rstrip("\n") + "\n" + current[len(target.old) :].lstrip("\n")
    capped = cap_text(text, target.cap)
    if len(capped) < len(text):
        log.info("l3_file_capped", file=target.label, dropped_chars=len(text) - len(capped))
    if capped == current:
        return "unchanged", current
    if len(current) > SHRINK_GUARD_CHARS and len(capped) < SHRINK_GUARD_RATIO * len(current):
        log.warning(
            "memory_rewrite_refused",
            file=target.label,
            purpose=target.purpose,
            old_chars=len(current),
            new_chars=len(capped),
        )
        return "refused", current
    return "written", capped
