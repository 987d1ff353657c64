"""One turn: lock, store the user message, build the context, run the agent loop, store the reply."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from agenthub.agent.loop import AgentLoop, TurnResult
from agenthub.agent.tools import ToolContext, tools_for
from agenthub.errors import ContextOverflowError, LLMError, ModelNotFoundError
from agenthub.gateway.runner import PendingTurn, SessionRunner
from agenthub.llm.types import LLMProvider
from agenthub.log import bound_turn
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

INTERNAL_ERROR = "Sorry, something went wrong on our side while answering. Please try again (ref {ref})."
OVERFLOW_AFTER_RETRY = (
    "This conversation is too long for the model even after compacting it. Send /compact to try again, "
    "or /restart to start over."
)


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended; after-turn hooks (the L2 consolidator) read it."""

    ok: bool
    code: str = "ok"
    usage: Usage = field(default_factory=Usage)
    last_usage: Usage = field(default_factory=Usage)
    provider: LLMProvider | None = None
    model: str = ""


class TurnRunner:
    """Runs turns for the gateway, with the outermost error boundary of each."""

    def __init__(self, gateway: GatewayCore) -> None:
        self.gateway = gateway
        self._outcomes: dict[asyncio.Task[None], TurnOutcome] = {}

    def outcome_of(self, task: asyncio.Task[None]) -> TurnOutcome:
        return self._outcomes.pop(task, TurnOutcome(ok=False, code="aborted"))

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
                gw.stats.aborted += 1
                log.info("turn_aborted", reason=reason)
                pending.handle.emit(ErrorEvent(_abort_message(reason), code=reason))
                raise
            except LLMError as e:
                gw.stats.turn_errors += 1
                log.warning("turn_llm_error", error=str(e), error_type=type(e).__name__)
                pending.handle.emit(ErrorEvent(e.user_message, code="llm_error"))
                self._outcomes[task] = TurnOutcome(ok=False, code="llm_error")
            except Exception:
                gw.stats.turn_errors += 1
                ref = pending.message_id[-8:]
                log.exception("turn_failed", ref=ref)
                pending.handle.emit(ErrorEvent(INTERNAL_ERROR.format(ref=ref), code="internal"))
                self._outcomes[task] = TurnOutcome(ok=False, code="internal")
            finally:
                if locked:
                    gw.sessions.release(pending.key, pending.message_id, failed=failed)

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
        await gw.history.append(pending.key, _user_record(pending))
        result = await self._run_with_recovery(pending, provider, model)
        await gw.history.append(
            pending.key, *result.new_messages, meta_changes={"last_usage": result.last_usage.as_dict()}
        )
        gw.stats.turns += 1
        pending.handle.emit(DoneEvent(result.text, result.usage, str(pending.key)))
        return TurnOutcome(True, "ok", result.usage, result.last_usage, provider, model)

    async def _run_with_recovery(self, pending: PendingTurn, provider: LLMProvider, model: str) -> TurnResult:
        """Run the loop; on context overflow compact once and retry; on an unknown hinted model fall back once."""
        overflow_retried = model_retried = False
        while True:
            try:
                return await self._run_loop(pending, provider, model)
            except ContextOverflowError as e:
                compactor = self.gateway.compactor
                if overflow_retried or compactor is None:
                    raise LLMError(str(e), user_message=OVERFLOW_AFTER_RETRY) from e
                overflow_retried = True
                pending.handle.emit(NoticeEvent("The conversation got too long; compacting it and retrying…"))
                await compactor.compact(pending.key, pending.agent, reason="overflow", actor="gateway")
            except ModelNotFoundError:
                default = pending.agent.config.model or provider.default_model
                if model_retried or model == default:
                    raise
                model_retried = True
                log.warning("model_not_found_fallback", model=model, fallback=default)
                pending.handle.emit(NoticeEvent(f"Model {model!r} is not available; using {default!r}."))
                model = default

    async def _run_loop(self, pending: PendingTurn, provider: LLMProvider, model: str) -> TurnResult:
        gw, agent, settings = self.gateway, pending.agent, self.gateway.settings
        history = await gw.history.load(pending.key)
        tools = tools_for(agent)
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
        loop = AgentLoop(
            provider,
            model,
            max_tokens=max_tokens,
            max_iterations=settings.llm.max_tool_iterations,
            llm_gate=gw.llm_gate,
        )
        ctx = ToolContext(
            agent=agent,
            key=pending.key,
            sender_id=pending.message.sender_id,
            memory=gw.memory_files,
            workspace=settings.workspace_dir / agent.name,
            memory_max_chars=settings.memory.memory_max_chars,
            search=gw.search,
        )
        return await loop.run(request, tools, ctx, pending.handle.emit)


def _user_record(pending: PendingTurn) -> dict[str, Any]:
    msg = pending.message
    record: dict[str, Any] = {"role": "user", "content": msg.content, "timestamp": msg.timestamp}
    record["channel"] = msg.channel
    if msg.sender_id:
        record["sender_id"] = msg.sender_id
    if msg.message_id:
        record["message_id"] = msg.message_id
    return record


def _abort_message(reason: str) -> str:
    return ABORT_MESSAGES.get(reason, "Stopped.")
