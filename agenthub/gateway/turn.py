"""One turn, within its time limit: store the user message, build the context, run the agent loop, store the reply."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from agenthub import i18n
from agenthub.agent.large_results import LargeResultStore
from agenthub.agent.loop import AgentLoop, TurnResult
from agenthub.agent.recall import with_recall
from agenthub.agent.tools import ToolContext
from agenthub.errors import (
    ContextOverflowError,
    LLMError,
    ModelNotFoundError,
    PathRefusedError,
    RequestRejectedError,
    StorageError,
)
from agenthub.gateway.inbox_replay import (
    INBOX_ID,
    StoredMessage,
    answered_by_storing,
    inbox_id_of,
    may_be_stored,
    stored_messages,
)
from agenthub.gateway.runner import PendingTurn
from agenthub.gateway.session_state import SessionState, SessionStatus
from agenthub.i18n import Text
from agenthub.llm.tokens import estimate_text_tokens, estimate_tokens
from agenthub.llm.types import CallOwner, LLMProvider
from agenthub.log import bound_turn
from agenthub.media.drop_folder import Intake, MediaInbox
from agenthub.messages import USER_ABORTS, DoneEvent, ErrorCode, ErrorEvent, InboundMessage, NoticeEvent, Usage
from agenthub.storage.lease import LetGoRide
from agenthub.storage.store import FencedWriteError

if TYPE_CHECKING:
    from agenthub.agent.context import ContextBuilder
    from agenthub.agent.mcp import McpHub
    from agenthub.agent.tools import ToolRegistry
    from agenthub.config import Settings
    from agenthub.gateway.stats import GatewayStats
    from agenthub.gateway.turn_services import TurnServices
    from agenthub.llm.registry import ProviderRegistry
    from agenthub.memory.files import MemoryFiles
    from agenthub.search.api import Searcher
    from agenthub.session.history import SessionHistory
    from agenthub.session_keys import SessionKey
    from agenthub.storage.meta import SessionMeta
    from agenthub.storage.store import HistoryRecord
    from agenthub.storage.usage import ClaimRide
    from agenthub.usage.admission import Admission, Refusal
    from agenthub.usage.ride import Ride

log = structlog.get_logger(__name__)

ABORT_TEXTS: dict[str, str] = {
    ErrorCode.STOPPED: "abort.stopped",
    ErrorCode.RESTART: "abort.restart",
    ErrorCode.TIMEOUT: "abort.timeout",
    ErrorCode.SHUTDOWN: "abort.shutdown",
    ErrorCode.LEASE_LOST: "abort.lease_lost",
}
"""The catalogue key of the reply a turn aborted for each reason ends with (any other reason: `abort.other`)."""

DEFERRED = "deferred"
"""The outcome code of a turn that did not run: an earlier message of its session waits in the local queue."""

REPLAYED = "replayed"
"""The outcome code of a turn whose messages were all answered before a crash: no model call, the stored answer."""

PROMPT_KINDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
"""The kinds of a call's usage that together are its prompt's size."""

OVERFLOW_AFTER_RETRY = Text("error.overflow_after_retry")
MESSAGE_TOO_LONG = Text("error.message_too_long")


class TurnTimedOut(Exception):
    """The turn ran longer than its `lock_timeout_s` and was cancelled."""


class EntryTakenOver(Exception):
    """A message of the turn is no longer this instance's inbox entry (another instance claimed it while this one
    looked dead): that instance answers it, this turn ends without answering (`LEASE_LOST`)."""


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended; after-turn hooks (the L2 consolidator) read it."""

    ok: bool
    code: str = "ok"
    usage: Usage = field(default_factory=Usage)
    last_usage: Usage = field(default_factory=Usage)
    provider: LLMProvider | None = None
    model: str = ""
    final: DoneEvent | ErrorEvent | None = None
    """The terminal event; the gateway emits it once the session is free again (so a message sent the moment
    the reply arrives neither queues behind this turn nor finds the chat busy)."""


class TurnHost(Protocol):
    """What a turn uses of the gateway (which provides it); nothing about queues, commands or lifecycles."""

    settings: Settings
    providers: ProviderRegistry
    history: SessionHistory
    context: ContextBuilder
    memory_files: MemoryFiles
    search: Searcher
    mcp: McpHub
    llm_gate: asyncio.Semaphore
    stats: GatewayStats
    tools: ToolRegistry

    def take_notices(self, key: SessionKey) -> list[Text]: ...

    async def prepare_turn(self, pending: PendingTurn, ride: ClaimRide | None = None) -> bool:
        """Hold the session for this turn (its lease) and keep its arrival order; False: requeue it;
        `EntryTakenOver` when another instance answers one of its messages now. `ride`: a budget reservation
        sent with the session's claim, if one is made now (`claims_in_one`)."""
        ...

    def claims_in_one(self, key: SessionKey) -> bool:
        """Whether the turn's session would be claimed now in one request something can ride in."""
        ...

    def let_go_riding(self, key: SessionKey) -> LetGoRide | None:
        """The session's lease to release with the turn's answer (it is let go at the end of the turn), or None."""
        ...

    async def still_ours(self, pending: PendingTurn) -> bool:
        """Whether every message of the turn that came through the inbox is still this instance's entry."""
        ...


class TurnRunner:
    """Runs turns for the gateway, with the outermost error boundary of each; `services`: the features they use."""

    def __init__(self, gateway: TurnHost, services: TurnServices) -> None:
        self.gateway = gateway
        self.services = services
        self.media = MediaInbox(gateway.settings.workspace_dir, gateway.settings.media)
        self._outcomes: dict[asyncio.Task[None], TurnOutcome] = {}

    def outcome_of(self, task: asyncio.Task[None]) -> TurnOutcome:
        return self._outcomes.pop(task, TurnOutcome(ok=False, code=ErrorCode.ABORTED))

    def _record_failure(self, task: asyncio.Task[None], code: str, message: str) -> None:
        self._outcomes[task] = TurnOutcome(ok=False, code=code, final=ErrorEvent(message, code=code))

    async def run(self, pending: PendingTurn, state: SessionState) -> None:
        """Run the turn to its outcome within the agent's (or the session default's) `lock_timeout_s`; the
        session is `processing` meanwhile and `error` after a turn that failed, timed out or was shut down."""
        gw = self.gateway
        task = asyncio.current_task()
        assert task is not None
        limit = pending.agent.config.lock_timeout_s or gw.settings.session.lock_timeout_s
        failed = True
        state.status = SessionStatus.PROCESSING
        with bound_turn(str(pending.key), pending.message.channel, pending.message_id):
            try:
                self._outcomes[task] = await self._execute_within(pending, limit)
                failed = False
            except asyncio.CancelledError:
                reason = state.abort_reason or ErrorCode.SHUTDOWN
                failed = reason not in USER_ABORTS  # /stop and /restart leave the session idle, not in error
                self._aborted(task, pending, reason)
                raise
            except TurnTimedOut:
                log.warning("session_lock_timeout", limit_s=limit)
                self._aborted(task, pending, ErrorCode.TIMEOUT)
            except FencedWriteError:  # another instance has the session now: it answers, this turn is cut
                log.warning("turn_write_fenced")
                self._aborted(task, pending, ErrorCode.LEASE_LOST)
            except EntryTakenOver:  # its new owner answers it: nothing of this turn is delivered
                log.warning("turn_entry_taken_over")
                self._aborted(task, pending, ErrorCode.LEASE_LOST)
            except PathRefusedError:
                gw.stats.turn_errors += 1
                log.warning("turn_path_refused")
                self._record_failure(task, ErrorCode.PATH_REFUSED, i18n.text("error.path_refused", pending.locale))
            except StorageError as e:
                gw.stats.turn_errors += 1
                log.warning("turn_storage_unavailable", error=str(e))
                unavailable = i18n.text("error.storage_unavailable", pending.locale)
                self._record_failure(task, ErrorCode.STORAGE_UNAVAILABLE, unavailable)
            except LLMError as e:
                gw.stats.turn_errors += 1
                log.warning("turn_llm_error", error=str(e), error_type=type(e).__name__)
                self._record_failure(task, ErrorCode.LLM_ERROR, e.user_text.render(pending.locale))
            except Exception:
                gw.stats.turn_errors += 1
                ref = pending.message_id  # whole: the id every log line of this turn carries
                log.exception("turn_failed", ref=ref)
                self._record_failure(task, ErrorCode.INTERNAL, i18n.text("error.internal", pending.locale, ref=ref))
            finally:
                state.status = SessionStatus.ERROR if failed else SessionStatus.IDLE

    def _aborted(self, task: asyncio.Task[None], pending: PendingTurn, reason: str) -> None:
        self.gateway.stats.aborted += 1
        log.info("turn_aborted", reason=reason)
        self._record_failure(task, reason, abort_message(reason, pending.locale, pending.message))

    async def _execute_within(self, pending: PendingTurn, limit_s: float) -> TurnOutcome:
        """`_execute` cancelled once it has run `limit_s` seconds (a hung tool or model call); `TurnTimedOut` then."""
        deadline = asyncio.timeout(limit_s)
        pending.began = time.monotonic()
        ride = self._ride(pending)  # the turn's budget check, sent with its session's claim when one is made
        try:
            async with deadline:  # waiting for another instance to let the session go counts against it too
                if not await self.gateway.prepare_turn(pending, None if ride is None else ride.sent):
                    return TurnOutcome(False, DEFERRED)
                return await self._execute(pending, ride)
        except TimeoutError:
            if deadline.expired():
                raise TurnTimedOut(limit_s) from None
            raise
        finally:  # ended before its check (deferred, taken over, failed): a reservation the ride made goes
            if ride is not None and self.services.usage is not None:
                self.services.usage.gate.let_go(ride)

    def _ride(self, pending: PendingTurn) -> Ride | None:
        """The budget check of a turn whose session is claimed in one request (PostgreSQL) before its check: the
        estimate as `_admit` makes it for a session without history (so exactly its own for a new session)."""
        usage, agent = self.services.usage, pending.agent
        if usage is None or not self.gateway.claims_in_one(pending.key):
            return None
        senders = [member.message.sender_id for member in pending.members]
        limit = agent.config.lock_timeout_s or self.gateway.settings.session.lock_timeout_s
        return usage.gate.ride(agent, pending.message, lambda: self._estimate(pending, [], None), limit, senders)

    async def _execute(self, pending: PendingTurn, ride: Ride | None = None) -> TurnOutcome:
        gw, msg, agent = self.gateway, pending.message, pending.agent
        provider, model, warnings = gw.providers.resolve(
            msg.model_hint, msg.provider_hint, agent.config.provider, agent.config.model
        )
        for notice in gw.take_notices(pending.key):
            pending.handle.emit(NoticeEvent(notice.render(pending.locale)))
        if warnings:
            log.warning("model_hint_fallback", warning=" ".join(w.render("en") for w in warnings))
            separator = i18n.text("llm.hint.separator", pending.locale)
            pending.handle.emit(NoticeEvent(separator.join(w.render(pending.locale) for w in warnings)))
        stored = await self._stored_members(pending)
        if _all_answered(pending, stored):  # answered before a crash, not settled: the stored answer, no model call
            return TurnOutcome(False, REPLAYED, final=_replayed(pending, stored))
        _end_answered_members(pending, stored)
        fresh = [member for member in pending.members if inbox_id_of(member.message) not in stored]
        intakes = [await self._take_in(member) for member in fresh]
        refusals = [text for intake in intakes for text in intake.refusals]
        answerable = len(fresh) < len(pending.members) or any(
            _has_something_to_answer(m, i) for m, i in zip(fresh, intakes, strict=True)
        )
        if refusals and not answerable:
            refused = ErrorEvent("\n".join(refusals), code=ErrorCode.MEDIA_REFUSED)  # only refused media: no model call
            return TurnOutcome(False, ErrorCode.MEDIA_REFUSED, final=refused)
        if self.services.usage is not None:  # per-person usage rows name the senders the channel named
            names = self.services.usage.gate.names_of(member.message for member in pending.members)
            if names:
                self.services.usage.recorder.name(msg.channel, names)
        admission = await self._admit(pending, ride)
        if admission is None:  # nothing limits this turn
            return await self._answer(pending, provider, model, stored, fresh, intakes, refusals)
        if admission.refused:  # refused before any model call, nothing stored
            refused = ErrorEvent(admission.text, code=ErrorCode.BUDGET_EXCEEDED)
            return TurnOutcome(False, ErrorCode.BUDGET_EXCEEDED, final=refused)
        outcome: TurnOutcome | None = None
        try:
            for warning in admission.notices:
                pending.handle.emit(NoticeEvent(warning))
            outcome = await self._answer(pending, provider, model, stored, fresh, intakes, refusals)
            return outcome
        finally:  # done, failed or cancelled: the reservation is settled with what was really used
            assert self.services.usage is not None
            self.services.usage.gate.settle(admission, None if outcome is None else _tokens(outcome.usage))

    async def _answer(
        self,
        pending: PendingTurn,
        provider: LLMProvider,
        model: str,
        stored: dict[str, StoredMessage],
        fresh: list[PendingTurn],
        intakes: list[Intake],
        refusals: list[str],
    ) -> TurnOutcome:
        """Store the new messages, run the model, store and deliver the answer."""
        gw = self.gateway
        for text in refusals:
            pending.handle.emit(NoticeEvent(text))
        if fresh:  # a message stored before a crash is not stored again
            joins = bool(stored) and _joins_last_record(stored, await gw.history.load(pending.key))
            await gw.history.append(pending.key, *_user_records(fresh, intakes, joins_last=joins))
        result = await self._run_with_recovery(pending, provider, model)
        try:
            changes = {"last_usage": result.last_usage.as_dict()}
            let_go = gw.let_go_riding(pending.key)  # decided before the append: a later message claims it again
            settles = _settled_by_the_answer(pending, stored)
            await gw.history.append(
                pending.key, *result.new_messages, meta_changes=changes, let_go=let_go, settles=settles
            )
        except (PathRefusedError, FencedWriteError):  # fenced: refused under an expired lease, never delivered
            raise
        except StorageError as e:  # the answer exists: deliver it, and say that the history will miss it
            log.warning("turn_reply_not_saved", error=str(e))
            pending.handle.emit(NoticeEvent(i18n.text("notice.reply_not_saved", pending.locale)))
        if not await self._still_ours_after_answer(pending):  # claimed meanwhile: its owner delivers the stored answer
            raise EntryTakenOver()
        gw.stats.turns += 1
        final = DoneEvent(result.text, result.usage, str(pending.key))
        return TurnOutcome(True, "ok", result.usage, result.last_usage, provider, model, final)

    async def _admit(self, pending: PendingTurn, ride: Ride | None = None) -> Admission | Refusal | None:
        """The gate's word (None: no budget applies), reserving an estimate of the prompt plus `max_tokens`
        (`ride`: the check sent with the session's claim, taken when it asked for this very estimate).

        The estimate reads the history the turn's first append reads next (`SessionHistory.peek`, which leaves it in
        the cache): when the cache does not hold it yet, that read is the turn's own, made one step early, and is not
        counted as the gate's CPU unless the turn is refused (then nothing else reads it); the estimate made from it
        always is."""
        usage, agent = self.services.usage, pending.agent
        senders = [member.message.sender_id for member in pending.members]  # a joined turn: every sender's budget
        if usage is None or (ride is None and not usage.gate.applies(agent, pending.message, senders)):
            return None  # (a ride is made only for a turn budgets apply to)
        with usage.gate.cpu.measure():  # budgets' work: counted as the gate's
            prompt = self._estimate_now(pending, ride)
        read = usage.gate.cpu.apart()
        if prompt is None:  # the cache does not hold the history yet: the turn reads it now, a step early
            history, meta = await read.run(self.gateway.history.peek(pending.key))
            with usage.gate.cpu.measure():
                prompt = self._estimate_from(pending, ride, history, meta)
        limit = agent.config.lock_timeout_s or self.gateway.settings.session.lock_timeout_s
        names = usage.gate.names_of(member.message for member in pending.members)
        word = await usage.gate.admit(agent, pending.message, prompt, pending.locale, limit, senders, names, ride)
        if word.refused:  # no append reads the history after all: the read was for budgets alone
            usage.gate.cpu.charge(read)
        return word

    def _estimate_now(self, pending: PendingTurn, ride: Ride | None) -> int | None:
        """`_estimate_from` the cache alone (`SessionHistory.peek_now`: no coroutine, no lock); None when the
        cache cannot answer it now."""
        seen = self.gateway.history.peek_now(pending.key)
        return None if seen is None else self._estimate_from(pending, ride, *seen)

    def _estimate_from(
        self, pending: PendingTurn, ride: Ride | None, history: list[HistoryRecord], meta: SessionMeta | None
    ) -> int:
        """The turn's estimate (`_estimate`), or the one its `ride` was made with when that was for this very turn (a
        session without history)."""
        if ride is not None and not history:  # what the ride was made for
            return ride.estimate
        return self._estimate(pending, history, meta)

    def _estimate(self, pending: PendingTurn, history: list[HistoryRecord], meta: SessionMeta | None) -> int:
        """The turn's estimate: the last call's prompt (else the history's estimate), the new messages, and the
        reply's room (`max_tokens`)."""
        prompt = sum(int(u.get(k, 0)) for k in PROMPT_KINDS) if meta and (u := meta.last_usage) else 0
        prompt = prompt or estimate_tokens(history)
        prompt += sum(estimate_text_tokens(member.message.content) for member in pending.members)
        return prompt + (pending.agent.config.max_tokens or self.gateway.settings.llm.max_tokens)

    async def _still_ours_after_answer(self, pending: PendingTurn) -> bool:
        """`still_ours`, once the answer is stored; a store that cannot tell: ours (the answer is delivered)."""
        try:
            return await self.gateway.still_ours(pending)
        except StorageError as e:
            log.warning("inbox_owner_unknown", error=str(e))
            return True

    async def _stored_members(self, pending: PendingTurn) -> dict[str, StoredMessage]:
        """What the history already holds of the turn's messages that came through the inbox (none, or all of them
        accepted just now by this process: nothing read)."""
        inbox_ids = [
            i for member in pending.members if may_be_stored(member.message) and (i := inbox_id_of(member.message))
        ]
        if not inbox_ids:
            return {}
        return stored_messages(await self.gateway.history.load(pending.key), inbox_ids)

    async def _take_in(self, member: PendingTurn) -> Intake:
        """Save the message's attachments (images and files) and say how to store them; none: nothing to do."""
        msg = member.message
        if not msg.attachments:
            return Intake()
        can_read = "read_file" in member.agent.config.tools
        return await self.media.take_in(member.key, msg.attachments, member.locale, can_read_files=can_read)

    async def _run_with_recovery(self, pending: PendingTurn, provider: LLMProvider, model: str) -> TurnResult:
        """Run the loop; on context overflow compact once and retry; on an unknown hinted model fall back once."""
        overflow_retried = model_retried = images_retried = False
        while True:
            try:
                return await self._run_loop(pending, provider, model)
            except RequestRejectedError:
                if images_retried:  # refused without images too: they were not the cause
                    self.gateway.context.text_only_models.discard(model)
                    raise
                if not self.gateway.context.sends_images(await self.gateway.history.load(pending.key), model):
                    raise
                images_retried = True
                self._send_images_as_text(pending, model)
            except ContextOverflowError as e:
                compactor = self.services.compactor
                if overflow_retried or compactor is None:
                    raise LLMError(str(e), user_text=OVERFLOW_AFTER_RETRY) from e
                overflow_retried = True
                await compactor.compact(pending.key, pending.agent, reason="overflow", actor="gateway")
                compacted = i18n.text("notice.overflow_compacting", pending.locale)
                pending.handle.emit(NoticeEvent(compacted))  # only once something was compacted
            except ModelNotFoundError:
                default = pending.agent.config.model or provider.default_model
                if model_retried or model == default:
                    raise
                model_retried = True
                log.warning("model_not_found_fallback", model=model, fallback=default)
                fallback = i18n.text("notice.model_fallback", pending.locale, model=repr(model), fallback=repr(default))
                pending.handle.emit(NoticeEvent(fallback))
                model = default

    def _send_images_as_text(self, pending: PendingTurn, model: str) -> None:
        """The model refused a request with images (a vendor without image input): from now on it gets their
        paths as text, and the user is told."""
        log.warning("model_refused_images", model=model)
        self.gateway.context.text_only_models.add(model)
        pending.handle.emit(NoticeEvent(i18n.text("media.model_cannot_see_images", pending.locale)))

    async def _run_loop(self, pending: PendingTurn, provider: LLMProvider, model: str) -> TurnResult:
        gw, agent, settings = self.gateway, pending.agent, self.gateway.settings
        history = await gw.history.load(pending.key)
        tools = [*gw.tools.for_agent(agent), *await gw.mcp.tools_for(agent)]
        max_tokens = agent.config.max_tokens or settings.llm.max_tokens
        workspace = settings.workspace_dir / agent.name
        ctx = ToolContext(
            agent=agent,
            key=pending.key,
            sender_id=pending.message.sender_id,
            memory=gw.memory_files,
            workspace=workspace,
            memory_max_chars=settings.memory.memory_max_chars,
            cred_id=pending.message.cred_id,
            search=gw.search,
            chat_type=chat_type if isinstance(chat_type := pending.message.metadata.get("chat_type"), str) else None,
            zone=settings.scheduler.zone,
        )
        request = await gw.context.build(
            agent=agent,
            key=pending.key,
            sender_id=pending.message.sender_id,
            history=history,
            tools=tools,
            model=model,
            max_tokens=max_tokens,
            fresh_since=pending.began,
        )
        request = await with_recall(request, history, ctx, settings)  # after the cached prefix, in this request only
        msg = pending.message
        joined = tuple(dict.fromkeys(m.message.sender_id for m in pending.members if m.message.sender_id))
        owner = CallOwner(agent.name, msg.channel, msg.chat_id, msg.sender_id, joined)  # whose usage the calls are
        purpose = "job" if isinstance(msg.metadata.get("scheduled_job"), str) else "turn"
        # offline: keep the locale when it is set or the sender chose it (the terminal, `?lang=`), else follow the words
        chosen = msg.metadata.get(i18n.LOCALE_CHOSEN) is True
        configured = chosen or i18n.locale_is_configured(settings, msg.channel, agent)
        request = dataclasses.replace(
            request, locale=pending.locale, locale_configured=configured, owner=owner, purpose=purpose
        )
        loop = AgentLoop(
            provider,
            model,
            max_tokens=max_tokens,
            max_iterations=settings.llm.max_tool_iterations,
            llm_gate=gw.llm_gate,
            large_results=LargeResultStore(
                workspace,
                settings.memory.large_tool_result_chars,
                key=pending.key,
                readable=any(t.name == "read_file" for t in tools),
            ),
        )
        return await loop.run(request, tools, ctx, pending.handle.emit)


def _has_something_to_answer(member: PendingTurn, intake: Intake) -> bool:
    return bool(member.message.content.strip()) or intake.accepted > 0


def _all_answered(pending: PendingTurn, stored: dict[str, StoredMessage]) -> bool:
    return bool(stored) and all(_stored_answer(member, stored) is not None for member in pending.members)


def _stored_answer(member: PendingTurn, stored: dict[str, StoredMessage]) -> str | None:
    inbox_id = inbox_id_of(member.message)
    found = stored.get(inbox_id) if inbox_id is not None else None
    return found.answer if found is not None else None


def _replayed(pending: PendingTurn, stored: dict[str, StoredMessage]) -> DoneEvent:
    """How an answered message ends again: with its answer, or, when a later message carried that answer, as it
    ended then (answered together; the channel sends nothing more for it)."""
    answer = _stored_answer(pending, stored)
    assert answer is not None
    inbox_id = inbox_id_of(pending.message)
    if inbox_id is not None and stored[inbox_id].joined and not pending.joined:
        note = i18n.text("done.answered_together", pending.locale)
        return DoneEvent(note, session_key=str(pending.key), joined=True, answer=answer)
    return DoneEvent(answer, session_key=str(pending.key))


def _settled_by_the_answer(pending: PendingTurn, stored: dict[str, StoredMessage]) -> list[str]:
    """The inbox entries the turn's answer settles as it is stored: its messages answered by being stored, but
    those answered before a crash (ended already: their own settles are on their way)."""
    return [
        inbox_id
        for member in pending.members
        if answered_by_storing(member.message)
        and _stored_answer(member, stored) is None
        and (inbox_id := inbox_id_of(member.message)) is not None
    ]


def _end_answered_members(pending: PendingTurn, stored: dict[str, StoredMessage]) -> None:
    """Earlier messages of the turn answered before a crash end with their own stored answer now."""
    for member in pending.joined:
        answer = _stored_answer(member, stored)
        if answer is not None:
            member.handle.emit(DoneEvent(answer, session_key=str(member.key)))


def _user_records(fresh: list[PendingTurn], intakes: list[Intake], *, joins_last: bool) -> list[dict[str, Any]]:
    """One stored user message per new message of the turn. `together` means "sent to the model with the user
    message just before it, both answered by the one answer after them": every record after the first, and the
    first only when it `joins_last` (the history ends with an unanswered message of this turn)."""
    records = [_user_record(member, intake) for member, intake in zip(fresh, intakes, strict=True)]
    for index, record in enumerate(records):
        if index > 0 or joins_last:
            record["together"] = True
    return records


def _joins_last_record(stored: dict[str, StoredMessage], history: list[dict[str, Any]]) -> bool:
    """Whether the turn's new messages follow one of its members stored unanswered before a crash as the history's
    last record: they then go to the model together with it. After an answer (or another turn) they never do, so a
    replay never joins messages that were answered apart (`inbox_replay`)."""
    last = history[-1] if history else {}
    last_id = last.get(INBOX_ID) if last.get("role") == "user" else None
    return isinstance(last_id, str) and last_id in stored


def _user_record(pending: PendingTurn, intake: Intake) -> dict[str, Any]:
    """The stored user message: its text, or with media its image references, text block and file lines (images
    first: the vendor finds images before the text about them best)."""
    msg = pending.message
    content: str | list[dict[str, Any]] = msg.content
    if intake.blocks:
        images = [b for b in intake.blocks if b.get("type") == "image"]
        lines = [b for b in intake.blocks if b.get("type") != "image"]
        text = [{"type": "text", "text": msg.content}] if msg.content.strip() else []
        content = [*images, *text, *lines]
    record: dict[str, Any] = {"role": "user", "content": content, "timestamp": msg.timestamp}
    record["channel"] = msg.channel
    if isinstance(msg.metadata.get("chat_type"), str):  # which memory scope the chat reads and feeds
        record["chat_type"] = msg.metadata["chat_type"]
    if msg.sender_id:
        record["sender_id"] = msg.sender_id
    if isinstance(msg.metadata.get("scheduled_job"), str):  # a prompt job's turn, run on its creator's behalf
        record["scheduled_job"] = msg.metadata["scheduled_job"]
    if msg.message_id:
        record["message_id"] = msg.message_id
    if (inbox_id := inbox_id_of(msg)) is not None:  # what makes a resumed message run exactly once
        record[INBOX_ID] = inbox_id
    return record


def abort_message(reason: str, locale: str, message: InboundMessage | None = None) -> str:
    """What a message whose turn was aborted for `reason` (an `ErrorCode`) ends with, in `locale`. A `message`
    stored in the durable inbox is answered after a shutdown: it is told so, never to send it again."""
    if reason == ErrorCode.SHUTDOWN and message is not None and inbox_id_of(message) is not None:
        return i18n.text("abort.shutdown_stored", locale)
    return i18n.text(ABORT_TEXTS.get(reason, "abort.other"), locale)


def _tokens(usage: Usage) -> int:
    """A turn's tokens as budgets count them: the four kinds added up."""
    return usage.prompt_tokens + usage.output_tokens
