"""AI-bot pushes across instances: WeCom allows one connection per bot, so an instance that does not hold it stores
its push in the deployment's outbox and waits for the outcome; the holder drains the outbox over its connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from agenthub.clock import Clock, monotonic_clock
from agenthub.errors import ChannelSendError, StorageError
from agenthub.storage.outbox import UNKNOWN_OUTCOME, OutboxRow, Outcome
from agenthub.storage.ports import Outbox
from channels.wecom.aibot_conn import AckTimeout, BotApiError
from channels.wecom.config import BotConfig

log = structlog.get_logger(__name__)

DRAIN_POLL_S = 0.5
"""How often the holder looks for pushes stored by other instances."""
OUTCOME_POLL_S = 0.2
"""How often a sender looks whether its push went out."""

NOBODY_TOOK_IT = "no instance holding the bot's connection took it within send_wait_s"
NOT_ACKED = "WeCom did not acknowledge it in time: it may or may not have arrived"
NOT_SENT = "the bot's connection could not send it"

Deliver = Callable[[str, str], Awaitable[None]]
"""Sends (chat id, text) over this instance's own connection."""


class BotRelay:
    """One bot's side of the outbox: `send` for a standby, `start_drain`/`stop_drain` for the holder."""

    def __init__(
        self,
        cred_id: str,
        target: str,
        config: BotConfig,
        outbox: Outbox,
        holder: str,
        deliver: Deliver,
        *,
        drain_poll_s: float = DRAIN_POLL_S,
        clock: Clock = monotonic_clock,
    ) -> None:
        self.cred_id, self.target, self.config = cred_id, target, config
        self.outbox, self.holder = outbox, holder
        self._deliver = deliver
        self._drain_poll_s = drain_poll_s
        self._clock = clock
        self._drainer: asyncio.Task[None] | None = None
        self.claim_s = config.send_wait_s + 4 * config.ack_timeout_s
        """How long a drainer's claim on a row lasts: its delivery waits up to send_wait_s for the connection."""

    # ---- the sender (an instance without the connection) --------------------------------------

    async def send(self, chat_id: str, text: str) -> None:
        """Store the push for the holder and wait up to `send_wait_s` for it to go out (one `ack_timeout_s` more
        when it is being sent then); `ChannelSendError` with a clear reason when it failed, when nobody took it
        (then it is withdrawn: never sent later) or when its outcome is unknown."""
        row_id = await self.outbox.put(self.target, {"chat_id": chat_id, "text": text})
        outcome = await self._outcome_within(row_id, self.config.send_wait_s)
        if outcome is None or not outcome.final:
            if await self.outbox.withdraw(row_id, NOBODY_TOOK_IT):
                outcome = Outcome("failed", NOBODY_TOOK_IT)
            else:  # claimed: its delivery is under way, give it one ack's time more
                outcome = await self._outcome_within(row_id, self.config.ack_timeout_s)
        if outcome is None or not outcome.final:
            log.warning("wecom_bot_relay_outcome_unknown", cred_id=self.cred_id, row=row_id)
            raise ChannelSendError(f"wecom bot {self.cred_id}: {UNKNOWN_OUTCOME}")
        await self.outbox.discard(row_id)
        if outcome.state == "failed":
            raise ChannelSendError(f"wecom bot {self.cred_id}: {outcome.reason or NOT_SENT}")

    async def _outcome_within(self, row_id: int, seconds: float) -> Outcome | None:
        deadline = self._clock() + seconds
        while True:
            outcome = await self.outbox.outcome(row_id)
            if outcome is None or outcome.final or self._clock() >= deadline:
                return outcome
            await asyncio.sleep(min(OUTCOME_POLL_S, max(0.0, deadline - self._clock())))

    # ---- the holder -----------------------------------------------------------------------------

    def start_drain(self) -> None:
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain_loop(), name=f"wecom-bot-relay-{self.cred_id}")

    async def stop_drain(self) -> None:
        """No more claims; a row claimed and not finished is failed by the next holder once its claim is over."""
        task, self._drainer = self._drainer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _drain_loop(self) -> None:
        while True:
            try:
                await self.drain_once()
            except StorageError:  # the database is away: the rows wait, their senders see the timeout
                log.warning("wecom_bot_relay_store_unavailable", cred_id=self.cred_id)
            await asyncio.sleep(self._drain_poll_s)

    async def drain_once(self) -> int:
        """Deliver every pending row of this bot, one claim at a time; how many were delivered or failed."""
        expired = await self.outbox.expire_claims(self.target)
        if expired:
            log.warning("wecom_bot_relay_claims_expired", cred_id=self.cred_id, rows=expired)
        done = 0
        while (row := await self.outbox.claim(self.target, self.holder, self.claim_s)) is not None:
            reason = await self._deliver_row(row)
            await self.outbox.finish(row.row_id, self.holder, reason)
            done += 1
        return done

    async def _deliver_row(self, row: OutboxRow) -> str | None:
        """None when sent, else a fixed reason (the exception's text stays in the log)."""
        chat_id, text = row.payload.get("chat_id"), row.payload.get("text")
        if not isinstance(chat_id, str) or not isinstance(text, str):
            return NOT_SENT
        try:
            await self._deliver(chat_id, text)
        except BotApiError as e:
            log.warning("wecom_bot_relay_refused", cred_id=self.cred_id, row=row.row_id, errcode=e.errcode)
            return f"WeCom refused it (errcode {e.errcode})"
        except AckTimeout:
            log.warning("wecom_bot_relay_not_acked", cred_id=self.cred_id, row=row.row_id)
            return NOT_ACKED
        except ChannelSendError as e:
            log.warning("wecom_bot_relay_failed", cred_id=self.cred_id, row=row.row_id, error=str(e))
            return NOT_SENT
        log.info("wecom_bot_relay_sent", cred_id=self.cred_id, row=row.row_id)
        return None
