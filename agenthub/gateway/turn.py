"""One turn: lock, store the user message, build the context, run the agent loop, store the reply."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from agenthub import i18n
from agenthub.agent.large_results import LargeResultStore
from agenthub.agent.loop import AgentLoop, TurnResult
from agenthub.agent.tools import ToolContext, tools_for
from agenthub.errors import (
    ContextOverflowError,
    LLMError,
    ModelNotFoundError,
    PathRefusedError,
    RequestRejectedError,
    StorageError,
)
from agenthub.gateway.runner import PendingTurn, SessionRunner
from agenthub.llm.types import LLMProvider
from agenthub.log import bound_turn
from agenthub.media.inbox import Intake, MediaInbox
from agenthub.messages import DoneEvent, ErrorEvent, NoticeEvent, Usage

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

log = structlog.get_logger(__name__)

ABORT_MESSAGES = {
    "stopped": "Stopped. The conversation is kept; send a new message to go on.",
    "restart": "Stopped for /restart.",
    "timeout": "This request took too long and was stopped. Please try again.",
    "shutdown": "The service is restarting; please send your message again in a moment.",
}

USER_ABORTS = frozenset({"stopped", "restart"})

INTERNAL_ERROR = "Sorry, something went wrong on our side while answering. Please try again (ref {ref})."
OVERFLOW_AFTER_RETRY = (
    "This conversation is too long for the model even after compacting it. Send /compact to try again, "
    "or /restart to start over."
)

MESSAGE_TOO_LONG = (
    "This message is too long for the model's context window, and there is nothing earlier in this chat to "
    "compact. Please shorten it or send it in smaller parts."
)
OVERFLOW_NOTICE = "The conversation got too long; compacting it and retrying…"


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


class TurnRunner:
    """Runs turns for the gateway, with the outermost error boundary of each."""

    def __init__(self, gateway: GatewayCore) -> None:
        self.gateway = gateway
        self.media = MediaInbox(gateway.settings.workspace_dir, gateway.settings.media)
        self._outcomes: dict[asyncio.Task[None], TurnOutcome] = {}

    def outcome_of(self, task: asyncio.Task[None]) -> TurnOutcome:
        return self._outcomes.pop(task, TurnOutcome(ok=False, code="aborted"))

    def _record_failure(self, task: asyncio.Task[None], code: str, message: str) -> None:
        self._outcomes[task] = TurnOutcome(ok=False, code=code, final=ErrorEvent(message, code=code))

    async def run(self, pending: PendingTurn, runner: SessionRunner) -> None:
        gw = self.gateway
        task = asyncio.current_task()
        assert task is not None
        failed, locked = True, False
        with bound_turn(str(pending.key), pending.message.channel, pending.message_id):
            try:
                gw.sessions.get_or_create(pending.key, lock_timeout_s=pending.agent.config.lock_timeout_s)
                gw.sessions.acquire(pending.key, pending.message_id)
                locked = True
                outcome = await self._execute(pending)
                failed = False
                self._outcomes[task] = outcome
            except asyncio.CancelledError:
                reason = runner.abort_reason or "shutdown"
                failed = reason not in USER_ABORTS  # /stop and /restart leave the session idle, not in error
                gw.stats.aborted += 1
                log.info("turn_aborted", reason=reason)
                self._record_failure(task, reason, _abort_message(reason))
                raise
            except PathRefusedError:
                gw.stats.turn_errors += 1
                log.warning("turn_path_refused")
                self._record_failure(task, "path_refused", self._text(pending, "error.path_refused"))
            except StorageError as e:
                gw.stats.turn_errors += 1
                log.warning("turn_storage_unavailable", error=str(e))
                self._record_failure(task, "storage_unavailable", self._text(pending, "error.storage_unavailable"))
            except LLMError as e:
                gw.stats.turn_errors += 1
                log.warning("turn_llm_error", error=str(e), error_type=type(e).__name__)
                self._record_failure(task, "llm_error", e.user_message)
            except Exception:
                gw.stats.turn_errors += 1
                ref = pending.message_id  # whole: the id every log line of this turn carries
                log.exception("turn_failed", ref=ref)
                self._record_failure(task, "internal", INTERNAL_ERROR.format(ref=ref))
            finally:
                if locked:
                    gw.sessions.release(pending.key, pending.message_id, failed=failed)

    def _text(self, pending: PendingTurn, key: str) -> str:
        """A catalogue text in the locale of the pending message's chat."""
        return i18n.text(key, i18n.locale_for(self.gateway.settings, pending.message.channel, pending.agent))

    async def _execute(self, pending: PendingTurn) -> TurnOutcome:
        gw, msg, agent = self.gateway, pending.message, pending.agent
        provider, model, warning = gw.providers.resolve(
            msg.model_hint, msg.provider_hint, agent.config.provider, agent.config.model
        )
        for notice in gw.take_notices(pending.key):
            pending.handle.emit(NoticeEvent(notice))
        if warning:
            log.warning("model_hint_fallback", warning=warning)
            pending.handle.emit(NoticeEvent(warning))
        intakes = [await self._take_in(member) for member in pending.members]
        refusals = [text for intake in intakes for text in intake.refusals]
        if refusals and not any(_has_something_to_answer(m, i) for m, i in zip(pending.members, intakes, strict=True)):
            refused = ErrorEvent("\n".join(refusals), code="media_refused")  # only refused media: no model call
            return TurnOutcome(False, "media_refused", final=refused)
        for text in refusals:
            pending.handle.emit(NoticeEvent(text))
        await gw.history.append(pending.key, *_user_records(pending, intakes))
        result = await self._run_with_recovery(pending, provider, model)
        try:
            await gw.history.append(
                pending.key, *result.new_messages, meta_changes={"last_usage": result.last_usage.as_dict()}
            )
        except PathRefusedError:
            raise
        except StorageError as e:  # the answer exists: deliver it, and say that the history will miss it
            log.warning("turn_reply_not_saved", error=str(e))
            pending.handle.emit(NoticeEvent(self._text(pending, "notice.reply_not_saved")))
        gw.stats.turns += 1
        final = DoneEvent(result.text, result.usage, str(pending.key))
        return TurnOutcome(True, "ok", result.usage, result.last_usage, provider, model, final)

    async def _take_in(self, member: PendingTurn) -> Intake:
        """Save the message's attachments (images and files) and say how to store them; none: nothing to do."""
        msg = member.message
        if not msg.attachments:
            return Intake()
        locale = i18n.locale_for(self.gateway.settings, msg.channel, member.agent)
        can_read = "read_file" in member.agent.config.tools
        return await self.media.take_in(member.key, msg.attachments, locale, can_read_files=can_read)

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
                compactor = self.gateway.compactor
                if overflow_retried or compactor is None:
                    raise LLMError(str(e), user_message=OVERFLOW_AFTER_RETRY) from e
                overflow_retried = True
                await compactor.compact(pending.key, pending.agent, reason="overflow", actor="gateway")
                pending.handle.emit(NoticeEvent(OVERFLOW_NOTICE))  # only once something was compacted
            except ModelNotFoundError:
                default = pending.agent.config.model or provider.default_model
                if model_retried or model == default:
                    raise
                model_retried = True
                log.warning("model_not_found_fallback", model=model, fallback=default)
                pending.handle.emit(NoticeEvent(f"Model {model!r} is not available; using {default!r}."))
                model = default

    def _send_images_as_text(self, pending: PendingTurn, model: str) -> None:
        """The model refused a request with images (a vendor without image input): from now on it gets their
        paths as text, and the user is told."""
        log.warning("model_refused_images", model=model)
        self.gateway.context.text_only_models.add(model)
        locale = i18n.locale_for(self.gateway.settings, pending.message.channel, pending.agent)
        pending.handle.emit(NoticeEvent(i18n.text("media.model_cannot_see_images", locale)))

    async def _run_loop(self, pending: PendingTurn, provider: LLMProvider, model: str) -> TurnResult:
        gw, agent, settings = self.gateway, pending.agent, self.gateway.settings
        history = await gw.history.load(pending.key)
        tools = [*tools_for(agent), *await gw.mcp.tools_for(agent)]
        max_tokens = agent.config.max_tokens or settings.llm.max_tokens
        request = await gw.context.build(
            agent=agent,
            key=pending.key,
            sender_id=pending.message.sender_id,
            history=history,
            tools=tools,
            model=model,
            max_tokens=max_tokens,
        )
        workspace = settings.workspace_dir / agent.name
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
        ctx = ToolContext(
            agent=agent,
            key=pending.key,
            sender_id=pending.message.sender_id,
            memory=gw.memory_files,
            workspace=workspace,
            memory_max_chars=settings.memory.memory_max_chars,
            cred_id=pending.message.cred_id,
            scheduler=gw.scheduler,
            search=gw.search,
            chat_type=chat_type if isinstance(chat_type := pending.message.metadata.get("chat_type"), str) else None,
        )
        return await loop.run(request, tools, ctx, pending.handle.emit)


def _has_something_to_answer(member: PendingTurn, intake: Intake) -> bool:
    return bool(member.message.content.strip()) or intake.accepted > 0


def _user_records(pending: PendingTurn, intakes: list[Intake]) -> list[dict[str, Any]]:
    """One stored user message per message of the turn; the later ones are flagged as sent together."""
    records = [_user_record(member, intake) for member, intake in zip(pending.members, intakes, strict=True)]
    for record in records[1:]:
        record["together"] = True
    return records


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
    return record


def _abort_message(reason: str) -> str:
    return ABORT_MESSAGES.get(reason, "Stopped.")
