"""GatewayCore: routes messages to agents and sessions, runs turns in order per session, owns lifecycles."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import structlog

from agenthub import i18n
from agenthub.agent.context import ContextBudget, ContextBuilder
from agenthub.agent.definition import AgentDefinition, AgentRegistry
from agenthub.agent.mcp import McpHub
from agenthub.agent.tools import ToolRegistry
from agenthub.clock import Clock, system_clock
from agenthub.config import Settings
from agenthub.errors import AgentNotFoundError, InvalidIdError, SessionBusyError, StorageError
from agenthub.gateway.arrival_order import ArrivalOrder
from agenthub.gateway.commands import CommandCall, CommandContext, CommandRouter, CommandTier
from agenthub.gateway.endings import end_unanswered, end_with
from agenthub.gateway.handle import ReplyHandle
from agenthub.gateway.inbox_replay import inbox_id_of
from agenthub.gateway.runner import PendingTurn
from agenthub.gateway.session_lease import SessionLeases
from agenthub.gateway.session_state import SessionRegistry, SessionState
from agenthub.gateway.stats import GatewayStats
from agenthub.gateway.timers import TimerRegistry
from agenthub.gateway.turn import DEFERRED, EntryTakenOver, TurnOutcome, TurnRunner, abort_message
from agenthub.gateway.turn_services import Compactor, TurnServices
from agenthub.ids import unique_hex
from agenthub.llm.cache_watch import CacheWatch
from agenthub.llm.registry import ProviderRegistry
from agenthub.memory.files import MemoryFiles
from agenthub.messages import ErrorCode, ErrorEvent, InboundMessage, NoticeEvent, Route
from agenthub.search.api import Searcher
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey, sender_problem, session_key
from agenthub.storage.lease import LetGoRide
from agenthub.storage.singleton import InstanceLeases

if TYPE_CHECKING:
    from agenthub.storage.ports import MemoryStore
    from agenthub.storage.usage import ClaimRide

log = structlog.get_logger(__name__)

AfterTurnHook = Callable[[PendingTurn, TurnOutcome], Awaitable[None]]
CompactionPlugIn = Callable[["GatewayCore"], Compactor]
"""Builds the memory layer on the gateway being constructed (its timers and after-turn hook go into the gateway's
registries) and gives its compactor: the gateway calls it once, at the end of its construction."""


class GatewayCore:
    """The one core every channel submits to.

    Same-session messages run one at a time in arrival order (the queue of the session's `SessionState`);
    different sessions run in parallel, bounded by `session.max_concurrent_llm` concurrent model calls.
    Priority commands bypass the queue; queued ones take their place in it. Use it as an async context manager:
    entering starts the timers, leaving aborts what still runs, stops the timers in reverse order, closes the MCP
    servers and the LLM providers. What its turns use beside (the inbox, usage, the memory layer's compaction) is
    given at construction and fixed from then on (`turn_services`).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        agents: AgentRegistry,
        providers: ProviderRegistry,
        history: SessionHistory,
        search: Searcher,
        clock: Clock = system_clock,
        leases: InstanceLeases | None = None,
        memory_store: MemoryStore | None = None,
        turn_services: TurnServices | None = None,
        compaction: CompactionPlugIn | None = None,
    ) -> None:
        """`history`, `search`: the sessions and the memory search kept current by observing them (built by the
        composition root); `turn_services`: what the turns are given (its compactor set by `compaction`, which
        builds the memory layer on this gateway once its parts exist)."""
        self.settings, self.agents, self.providers, self.clock = settings, agents, providers, clock
        self.history = history
        self.leases = leases or InstanceLeases(ttl_s=settings.store.lease_s)
        """The deployment's singleton leases (files mode: a store of this instance's own, always held)."""
        self.sessions = SessionRegistry(ttl_s=settings.session.ttl_s, on_expire=self.history.evict)
        self.session_leases = SessionLeases(self.leases, self.history, on_lost=self._session_lease_lost)
        """Lease `session:<key>` around every turn, queued command and hold: one instance at a time per session."""
        self.memory_files = MemoryFiles(settings.data_dir, settings.auth_dir, memory_store)  # default: files
        self.search = search
        self.history.observers.append(self.search.history_changed)
        self.context = self._context_builder()
        self.stats = GatewayStats()
        self.cache_watch = self._watch_calls()
        self.timers = TimerRegistry(self.leases)
        self.commands = CommandRouter()  # the built-ins and the features' commands, from the composition root
        self.tools = ToolRegistry()  # the memory tools; the features' platform tools from the composition root
        self.after_turn_hooks: list[AfterTurnHook] = []
        self.mcp = McpHub()
        self.llm_gate = asyncio.Semaphore(settings.session.max_concurrent_llm)
        given = turn_services or TurnServices()
        inbox = given.inbox
        self.arrival_order = ArrivalOrder(
            lambda: inbox,
            self.history,
            self.session_leases,
            lease_s=self.leases.ttl_s,
            turn_limit_s=lambda pending: self._lease_wait_s(pending.agent),
        )
        """Per-session arrival order across instances: the inbox's acceptance order."""
        self._background: dict[SessionKey, asyncio.Task[None]] = {}
        self._notices: dict[SessionKey, list[i18n.Text]] = {}
        self._accepting = True
        self._entered = False
        self.timers.add("session_sweep", 1.0, self._expire_idle_sessions)
        compactor = None if compaction is None else compaction(self)  # its timers after the sweep, as before
        self.turn_services = dataclasses.replace(given, compactor=compactor or given.compactor)
        self.turns = TurnRunner(self, self.turn_services)

    def _context_builder(self) -> ContextBuilder:
        """Request assembly over the memory files; a history replace drops a session's converted messages."""
        memory = self.settings.memory
        budget = ContextBudget(memory.memory_budget_tokens, memory.user_budget_tokens, memory.old_tool_result_chars)
        context = ContextBuilder(
            self.memory_files, budget, workspace_dir=self.settings.workspace_dir, zone=self.settings.scheduler.zone
        )
        self.history.observers.append(context.history_changed)
        return context

    def _watch_calls(self) -> CacheWatch:
        """Every model call (turns and background work alike) reaches the stats through the providers' call log,
        and each chat's calls are compared for prompt-cache breaks (a compaction or restart names the break);
        memory additions ride as notes while the cache is warm."""
        self.providers.call_log.observe(self.stats.record_call)
        watch = self.providers.call_log.cache
        watch.clock = self.clock
        self.history.observers.append(watch.history_changed)
        self.context.cache_warm = watch.warm
        return watch

    # ---- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> GatewayCore:
        if self._entered:
            raise RuntimeError("GatewayCore was already started")
        self._entered = True
        await self.timers.start()
        self.mcp.sync(self.agents.agents.values())
        self.session_leases.start()  # last: an entry that fails leaves no task behind (`__aexit__` stops it)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort_all("shutdown")
        tasks = [s.task for s in self.sessions if s.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._cancel_all_background()
        await self.timers.stop()
        await self.mcp.aclose()
        await self.history.aclose()  # the meta written behind, still under the sessions' leases
        await self.session_leases.close()
        self.history.observers.remove(self.search.history_changed)
        await self.search.close()
        usage = self.turn_services.usage
        if usage is not None:  # the calls of the turns just ended reach the store, their reservations go
            await usage.recorder.aclose()
        await self.providers.aclose()

    def abort_all(self, reason: str) -> None:
        """Stop accepting, abort every running turn and answer every queued message with an error."""
        self._accepting = False
        for task in self._background.values():
            task.cancel()
        for state in self.sessions:
            state.abort(reason)
            for pending in state.queue:
                pending.handle.emit(ErrorEvent(abort_message(reason, pending.locale, pending.message), code=reason))
            state.queue.clear()

    @property
    def accepting(self) -> bool:
        """False once `drain()` or `abort_all()` has begun."""
        return self._accepting

    async def drain(self, timeout_s: float) -> bool:
        """Stop accepting new messages and wait up to `timeout_s` for queued and running turns; True if all done."""
        self._accepting = False
        tasks = [s.task for s in self.sessions if s.task is not None]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        return not pending

    def use_agents(self, agents: AgentRegistry) -> None:
        """Route to these agent definitions from now on (SIGHUP's reload), their MCP servers synced."""
        self.agents = agents
        self.mcp.sync(agents.agents.values())

    # ---- routing -------------------------------------------------------------------------------

    def route(self, route: Route) -> AgentDefinition:
        """Explicit agent, else the channel/cred_id binding, else the default agent."""
        return self.agents.get(self.agent_name(route))

    def agent_name(self, route: Route) -> str:
        """The name of the agent a route goes to (which may not exist)."""
        bindings = self.settings.bindings
        return (
            route.agent
            or (route.cred_id and bindings.get(f"{route.channel}:{route.cred_id}"))
            or bindings.get(route.channel)
            or self.settings.default_agent
        )

    def resolve_route(self, route: Route) -> tuple[AgentDefinition, SessionKey]:
        """The agent and session of `route`: the one rule, for a message (`resolve_key`) and before it is built
        (`session_of`). `InvalidIdError`, `AgentNotFoundError` when it cannot be routed."""
        agent = self.route(route)
        return agent, session_key(agent.name, route.channel, route.chat_id)

    def resolve_key(self, message: InboundMessage) -> tuple[AgentDefinition, SessionKey]:
        """`resolve_route`, and `InvalidIdError` for a sender id nothing can store (NUL)."""
        problem = sender_problem(message.sender_id)
        if problem is not None:
            raise InvalidIdError(f"sender_id {problem}")
        return self.resolve_route(message.route)

    def session_of(self, route: Route) -> str | None:
        """The session `route` will run in (`agent:channel:chat_id`), None when it cannot be routed: what the
        inbox stores with an entry accepted for it."""
        try:
            return str(self.resolve_route(route)[1])
        except (InvalidIdError, AgentNotFoundError):
            return None

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        """Accept one message; the returned handle yields its reply events (bad input ends it with an error)."""
        try:
            agent, key = self.resolve_key(message)
        except InvalidIdError as e:
            log.info("message_refused", channel=message.channel, reason=str(e))
            return _failed(i18n.text("error.invalid_id", self._channel_locale(message)), ErrorCode.INVALID_ID)
        except AgentNotFoundError:
            unknown = i18n.text(
                "error.unknown_agent", self._channel_locale(message), agent=self.agent_name(message.route)
            )
            return _failed(unknown, ErrorCode.UNKNOWN_AGENT)
        locale = i18n.locale_for(self.settings, message.channel, agent, message.metadata.get("locale"))
        handle = ReplyHandle(str(key))
        if not self._accepting:
            cut = abort_message(ErrorCode.SHUTDOWN, locale, message)  # stored in the inbox: answered after the restart
            handle.emit(ErrorEvent(cut, code=ErrorCode.SHUTDOWN))
            return handle
        message_id = message.message_id or f"local-{new_message_id()}"
        await self.arrival_order.assign(message, key)  # a pushed entry's place in its session's order
        matched = self.commands.match(message.content)
        if matched is None:
            self._enqueue(PendingTurn(message, key, agent, handle, message_id, locale=locale))
            return handle
        command, args = matched
        ctx = CommandContext(self, key, agent, message, args, locale)  # the gateway as the session's controls
        if command.tier is CommandTier.QUEUED:
            call = CommandCall(command, ctx)
            self._enqueue(PendingTurn(message, key, agent, handle, message_id, locale=locale, command=call))
        else:
            await self.commands.run(command, ctx, handle)
        return handle

    def _channel_locale(self, message: InboundMessage) -> i18n.Locale:
        """The locale of a message whose agent is not known (a bad id or an unknown agent)."""
        return i18n.channel_locale(self.settings, message.channel, message.metadata.get("locale"))

    # ---- per-session queues --------------------------------------------------------------------

    def _enqueue(self, pending: PendingTurn) -> None:
        state = self.sessions.state(pending.key)
        limit = self.settings.session.max_queued
        if len(state.queue) >= limit:  # refused before anything is stored; the sender can send it again later
            log.warning("queue_full", session_key=str(pending.key), waiting=len(state.queue))
            refused = i18n.text("error.queue_full", pending.locale, limit=limit)
            pending.handle.emit(ErrorEvent(refused, code=ErrorCode.QUEUE_FULL))
            self.sessions.release(state)
            return
        self.sessions.touch(pending.key, self.clock())  # a message: the TTL starts again
        pending.waited = state.busy
        state.enqueue(pending)
        if state.depth > 1:
            waiting = i18n.text("notice.queued", pending.locale, count=state.depth - 1)
            pending.handle.emit(NoticeEvent(waiting, transient=True))
        if state.task is None:
            state.task = asyncio.create_task(self._work(state), name=f"session:{pending.key}")

    async def _work(self, state: SessionState) -> None:
        try:
            while state.queue:
                pending = state.queue[0]  # stays queued (droppable by /stop) while it waits for the session
                started = requeued = False
                try:
                    async with state.mutex:
                        if not state.queue or state.queue[0] is not pending:  # dropped or aborted meanwhile
                            continue
                        pending = state.take_next()  # what waited behind the last turn goes to the model as one
                        if pending.command is not None:  # a queued command: its place in the order, no turn
                            await self._run_queued_command(pending)
                            continue
                        state.current, state.abort_reason = pending, None
                        state.turn_task = asyncio.create_task(self.turns.run(pending, state))
                        started = True
                        try:
                            await asyncio.wait([state.turn_task])
                        except asyncio.CancelledError:
                            state.turn_task.cancel()
                            with contextlib.suppress(asyncio.CancelledError):
                                await state.turn_task
                            raise
                        outcome = self.turns.outcome_of(state.turn_task)
                        state.current, state.turn_task = None, None
                        if outcome.code == DEFERRED:  # an earlier message of the session arrived here: it goes first
                            requeued = True
                            state.requeue(pending)
                            continue
                        state.last_active = self.clock()  # the end of a turn counts as activity too
                        try:
                            await self._let_go_before_reply(state)
                        finally:  # after `current` is cleared: a follow-up queues behind nothing
                            end_with(pending, outcome)
                        await self._after_turn(pending, outcome)
                finally:
                    if not requeued:
                        end_unanswered(pending, (state.abort_reason if started else None) or ErrorCode.SHUTDOWN)
        finally:
            state.current = None
            state.task = None
            if state.holds == 0:  # the local queue is empty: another instance may have the session now
                self.session_leases.release(state.key)
            self.sessions.release(state)

    def let_go_riding(self, key: SessionKey) -> LetGoRide | None:
        """The session's lease, to be released with its turn's answer when nothing else waits for the session here
        and its lease would be let go at once (`SessionLeases.let_go_riding`); None otherwise. A message that comes
        after this decision claims the session again (as one after `_let_go_before_reply`)."""
        state = self.sessions.get(key)
        if state is None or state.queue or state.holds:
            return None
        return self.session_leases.let_go_riding(key)

    async def _let_go_before_reply(self, state: SessionState) -> None:
        """A session with nothing more to do here whose lease is let go at once (it moves between instances) is
        let go before its reply goes out: the next message, sent on the reply, finds it free wherever it lands,
        instead of being refused and waiting to hear of the let-go. A kept one costs nothing here."""
        if not state.queue and state.holds == 0:
            await self.session_leases.release_settled(state.key)

    async def _run_queued_command(self, pending: PendingTurn) -> None:
        assert pending.command is not None
        try:
            await self.session_leases.claim_within(pending.key, self._lease_wait_s(pending.agent))
        except (SessionBusyError, StorageError) as e:
            log.warning("queued_command_not_run", session_key=str(pending.key), error_type=type(e).__name__)
            code = ErrorCode.TIMEOUT if isinstance(e, SessionBusyError) else ErrorCode.STORAGE_UNAVAILABLE
            key = "abort.timeout" if isinstance(e, SessionBusyError) else "error.storage_unavailable"
            pending.handle.emit(ErrorEvent(i18n.text(key, pending.locale), code=code))
            return
        await self.commands.run(pending.command.command, pending.command.context, pending.handle)

    def _lease_wait_s(self, agent: AgentDefinition | None = None) -> float:
        """How long a turn, command or hold waits for another instance to let the session go: a turn's limit."""
        override = agent.config.lock_timeout_s if agent is not None else None
        return override or self.settings.session.lock_timeout_s

    async def prepare_turn(self, pending: PendingTurn, ride: ClaimRide | None = None) -> bool:
        """Inside the turn's time limit: hold the session's lease (waiting while another instance runs it), then
        keep its arrival order; False when an earlier message waits in the local queue (the turn is requeued).
        `ride`: the turn's budget reservation, made in the claim's request (`claims_in_one`)."""
        await self.session_leases.claim(pending.key, ride=ride)
        state = self.sessions.get(pending.key)
        if not await self.arrival_order.ready(pending, state.queue if state is not None else []):
            return False
        if not await self.still_ours(pending):  # claimed by another instance while this one looked dead
            raise EntryTakenOver()
        return True

    def claims_in_one(self, key: SessionKey) -> bool:
        return self.session_leases.claims_in_one(key)

    async def still_ours(self, pending: PendingTurn) -> bool:
        """Whether every inbox entry of the turn is still this instance's to answer (asked of the shared inbox)."""
        inbox = self.turn_services.inbox
        if inbox is None:
            return True
        for member in pending.members:
            entry_id = inbox_id_of(member.message)
            if entry_id is not None and not await inbox.still_mine(entry_id):
                log.warning("inbox_entry_taken_over", session_key=str(pending.key), entry_id=entry_id)
                return False
        return True

    def _session_lease_lost(self, key: SessionKey) -> None:
        state = self.sessions.get(key)
        if state is not None and state.abort(ErrorCode.LEASE_LOST):
            log.warning("turn_cancelled_lease_lost", session_key=str(key))

    async def _after_turn(self, pending: PendingTurn, outcome: TurnOutcome) -> None:
        for hook in self.after_turn_hooks:
            try:
                await hook(pending, outcome)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("after_turn_hook_failed", session_key=str(pending.key))

    def is_busy(self, key: SessionKey) -> bool:
        """True while the session has a running or queued turn, or its post-turn work, or maintenance."""
        return self.sessions.is_busy(key)

    def queue_depth(self) -> int:
        return self.sessions.queue_depth()

    @asynccontextmanager
    async def exclusive(self, key: SessionKey) -> AsyncIterator[None]:
        """Hold the session for maintenance (compaction); `SessionBusyError` if it is busy now.

        Messages that arrive meanwhile queue up and run when the block exits.
        """
        if self.is_busy(key):
            raise SessionBusyError(f"session {key} is busy")
        async with self._held(key, wait=False):
            yield

    @asynccontextmanager
    async def hold(self, key: SessionKey) -> AsyncIterator[None]:
        """Wait for the session's running turn (and its after-turn work) to finish, here or on another instance
        (SessionBusyError after a turn's time limit), then keep the next queued turn waiting until the block
        exits."""
        async with self._held(key, wait=True):
            yield

    @asynccontextmanager
    async def _held(self, key: SessionKey, *, wait: bool) -> AsyncIterator[None]:
        state = self.sessions.state(key)
        state.holds += 1  # keeps the state (and so its mutex) registered while this block waits or runs
        try:
            async with state.mutex:
                if wait:
                    await self.session_leases.claim_within(key, self._lease_wait_s())
                else:  # busy on another instance is busy too
                    await self.session_leases.claim(key, wait=False)
                yield
        finally:
            state.holds -= 1
            if state.holds == 0 and state.task is None:
                self.session_leases.release(key)
            self.sessions.release(state)

    def running_senders(self, key: SessionKey) -> frozenset[str]:
        """Who the turn running in the session answers (empty when none runs)."""
        state = self.sessions.get(key)
        running = None if state is None else state.current
        return frozenset() if running is None else frozenset(running.senders)

    def abort(self, key: SessionKey, reason: str = ErrorCode.STOPPED) -> bool:
        state = self.sessions.get(key)
        return state is not None and state.abort(reason)

    def drop_queued(self, key: SessionKey, sender_id: str, reason: str = ErrorCode.STOPPED) -> int:
        """End the messages `sender_id` queued in this session that have not started (nothing of them is stored
        yet); each handle ends with the `reason` error. Returns how many were dropped."""
        state = self.sessions.get(key)
        if state is None:
            return 0
        dropped = [p for p in state.queue if p.message.sender_id == sender_id]
        for pending in dropped:
            state.queue.remove(pending)
            end_unanswered(pending, reason)
        return len(dropped)

    async def wait_turn_done(self, key: SessionKey) -> None:
        """Wait until the session's current turn task has ended (its outcome is not raised here)."""
        state = self.sessions.get(key)
        if state is not None and state.turn_task is not None:
            await asyncio.wait([state.turn_task])

    # ---- background work per session (compaction) ------------------------------------------------

    def start_background(self, key: SessionKey, work: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        """Run `work` (a compaction) beside the session's turns; at most one per session, none once shutting
        down: then `work` is closed unrun and None returned. /restart, /stop and shutdown cancel it."""
        if key in self._background or not self._accepting:
            work.close()
            return None
        task = asyncio.create_task(work, name=f"background:{key}")
        self._background[key] = task
        task.add_done_callback(lambda done: self._background_done(key, done))
        return task

    def _background_done(self, key: SessionKey, task: asyncio.Task[None]) -> None:
        if self._background.get(key) is task:
            del self._background[key]
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("background_work_failed", session_key=str(key), error_type=type(error).__name__)

    def background(self, key: SessionKey) -> asyncio.Task[None] | None:
        """The session's running background work, if any."""
        return self._background.get(key)

    async def cancel_background(self, key: SessionKey) -> bool:
        """Abort the session's background work (its model call too) and wait until it has stopped."""
        task = self._background.get(key)
        if task is None:
            return False
        task.cancel()
        await asyncio.wait([task])
        return True

    async def _cancel_all_background(self) -> None:
        tasks = list(self._background.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # ---- commands and housekeeping -------------------------------------------------------------

    def notify_next_turn(self, key: SessionKey, text: i18n.Text) -> None:
        """Queue a notice for the session's next reply (e.g. that background compaction summarised it); it is
        rendered in that reply's locale."""
        self._notices.setdefault(key, []).append(text)

    def take_notices(self, key: SessionKey) -> list[i18n.Text]:
        return self._notices.pop(key, [])

    async def _expire_idle_sessions(self) -> None:
        """The `session_sweep` tick. A periodic pass (not a `call_at` per session): it reads the injected clock,
        costs one look at each live session a second, and leaves the hot path nothing to reschedule per message."""
        self.sessions.expire(self.clock())


def _failed(message: str, code: ErrorCode) -> ReplyHandle:
    handle = ReplyHandle("?")
    handle.emit(ErrorEvent(message, code=code))
    return handle


def new_message_id() -> str:
    return unique_hex()
