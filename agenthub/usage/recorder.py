"""`UsageRecorder`: every model call becomes a usage row (written in batches off the call's path) and counters."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from zoneinfo import ZoneInfo

import structlog

from agenthub.aio import run_to_end, succeeded
from agenthub.clock import Clock
from agenthub.errors import StorageError
from agenthub.llm.tokens import estimate_text_tokens, estimate_tokens
from agenthub.llm.types import LLMRequest, LLMResponse
from agenthub.storage.ports import UsageStore
from agenthub.storage.usage import TOKEN_KINDS, UsageRow
from agenthub.usage.meter import CpuMeter
from agenthub.usage.periods import day_of, first_kept_month
from agenthub.usage.spool import UsageSpool, forget_spool

log = structlog.get_logger(__name__)

RETRY_S = 5.0
"""After a failed write the rows wait this long (kept in memory) before the next attempt."""
NAMES_KEPT = 10_000
"""How many senders' names the recorder remembers having stored (so that a name is written once, not per turn)."""
NAME_AGAIN_S = 3600.0
"""A name stored is written again when told this long after (a forget on another instance dropped it: it is back
within this time once they talk again)."""
GATHER_S = 0.05
"""The writer waits this long before a write, so that the calls and settlements of turns running together (and a
turn's last call and its settlement) go in one write. Until then a turn's reservation still counts: never less."""


class UsageRecorder:
    """Watches the providers' call log (`CallLog.watch`); `flush()` returns once every call seen so far is stored."""

    def __init__(
        self,
        store: UsageStore,
        zone: ZoneInfo,
        clock: Clock,
        spool: UsageSpool | None = None,
        *,
        gather_s: float = GATHER_S,
    ) -> None:
        self.store = store
        self.gather_s = gather_s
        """How long the writer gathers before a write (`GATHER_S`; a test that orders the writes itself: longer)."""
        self.spool = spool
        """Where the rows not stored yet are kept too, so that a killed process loses none (None: memory only)."""
        self.zone = zone
        self.clock = clock
        self.tokens: Counter[tuple[str, str, str]] = Counter()
        """(agent, purpose, kind) → tokens since start: `agenthub_llm_tokens_total`."""
        self.refusals: Counter[str] = Counter()
        """scope kind → turns refused since start: `agenthub_budget_refusals_total`."""
        self._pending: list[UsageRow] = []
        self._pruned_on = ""  # the day retention last ran
        self._named: dict[tuple[str, str], tuple[str, float]] = {}  # (channel, sender) → the name stored or about
        # to be, and when it was told
        self._names: dict[tuple[str, str], str] = {}  # the names not stored yet
        self._told: dict[tuple[str, str], float] = {}  # when each of them was told (a forget since: not stored)
        self._releases: list[str] = []
        self._stored = 0  # rows stored since start (by `flush`)
        self._writing = 0  # rows in the write under way
        self._marks: dict[str, int] = {}  # settled reservation → rows seen when it was settled; until its release is
        # written
        self._recovered: list[tuple[Path, list[UsageRow]]] = []
        self._lock = asyncio.Lock()
        self._writer: asyncio.Task[None] | None = None
        self.before_close: list[Callable[[], None]] = []
        self.release_cpu = CpuMeter()
        """The CPU time of writes that only end reservations (budgets' share of the writer's work)."""
        """Called first by `aclose` (the budget gate ends its leases, so their release is in the last write)."""

    def watch(self, request: LLMRequest, response: LLMResponse) -> None:
        row = self.row_of(request, response)
        for kind in ("input", "output", "cache_read", "cache_write"):
            self.tokens[(row.agent, row.purpose, kind)] += getattr(row, kind)
        rows = split(row, request.owner.senders if request.owner else ())
        self._pending += rows
        if self.spool is not None:
            self.spool.append(rows)
        self._kick()

    def name(self, channel: str, names: Mapping[str, str]) -> None:
        """The display names a channel gave for senders (id → name), stored with the next write when new."""
        now = self.clock()
        for sender, name in names.items():
            known = self._named.get((channel, sender))
            if known is None or known[0] != name or now - known[1] >= NAME_AGAIN_S:
                if len(self._named) >= NAMES_KEPT:
                    self._named.clear()  # a name told again is written again: harmless
                self._named[(channel, sender)] = (name, now)
                self._names[(channel, sender)] = name
                self._told[(channel, sender)] = now
        if self._names:
            self._kick()

    def recover(self) -> int:
        """Take over the spools of processes that died with rows not stored (written by the next flush where the
        store lacks them) and start writing if a loop runs; how many rows."""
        if self.spool is None:
            return 0
        self._recovered += self.spool.recover()
        count = sum(len(rows) for _, rows in self._recovered)
        if self._recovered:
            log.info("usage_spool_recovered", rows=count, files=len(self._recovered))
            try:
                self._kick()
            except RuntimeError:  # no running loop: the first call's write (or `flush`) takes them
                pass
        return count

    def _kick(self) -> None:
        """Start the writer unless it runs: it writes what is pending, retrying while the store is away."""
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_soon(), name="usage-writer")

    def row_of(self, request: LLMRequest, response: LLMResponse) -> UsageRow:
        """The call's row: the vendor's four token counts; none reported: our estimate, flagged."""
        u, owner, now = response.usage, request.owner, self.clock()
        counts = (u.input_tokens, u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens)
        estimated = response.usage_estimated or not any(counts)
        if not any(counts):
            prompt = estimate_tokens([request.system, request.messages, request.tools])
            counts = (prompt, estimate_text_tokens(response.text), 0, 0)
        return UsageRow(
            day_of(now, self.zone),
            request.purpose,
            owner.agent if owner else "",
            owner.channel if owner else "",
            owner.chat_id if owner else "",
            owner.sender_id if owner else "",
            response.model or request.model,
            *counts,
            calls=1,
            estimated=int(estimated),
            at=now,
        )

    async def _write_soon(self) -> None:
        await asyncio.sleep(self.gather_s)
        while self._pending or self._releases or self._recovered or self._names:
            try:
                await self.flush()
            except StorageError as e:
                log.warning("usage_not_recorded_yet", rows=len(self._pending), error=str(e))
                await asyncio.sleep(RETRY_S)
        await self.prune()

    async def prune(self) -> int:
        """Retention, once a day (the writer's first write of the day asks): the months before the ones kept are
        folded into month roll-ups (`UsageStore.prune`); how many day records were folded. A store that fails is
        asked again by the next write."""
        today = day_of(self.clock(), self.zone)
        if today == self._pruned_on:
            return 0
        self._pruned_on = today
        before = first_kept_month(today)
        try:
            folded = await self.store.prune(before)
        except StorageError as e:
            self._pruned_on = ""
            log.warning("usage_not_pruned", error=str(e))
            return 0
        if folded:
            log.info("usage_pruned", before_month=before, day_records=folded)
        return folded

    async def idle(self) -> None:
        """Return once the writer has nothing left to do (tests)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])

    def release(self, reservation_id: str, *, unspent: bool = False) -> None:
        """End the reservation in the writer's next write, together with (so never before) every row seen so far:
        the turn's calls; the writes of concurrent turns' settlements are batched. `unspent`: nothing was spent
        under it (a turn's check that rode in its session's claim and was not used): checks leave it out at once."""
        self._releases.append(reservation_id)
        self._marks[reservation_id] = 0 if unspent else self._stored + self._writing + len(self._pending)
        self._kick()

    def releases_waiting(self) -> set[str]:
        """The settled reservations not written yet (the store still counts them)."""
        return set(self._releases)

    def stored_releases(self) -> list[str]:
        """The settled reservations whose release is not written yet (waiting, or in the write under way) while
        every row seen before they were settled is stored: the turns' usage is in the store, so a budget check
        leaves these out (counted twice, a sender was refused within their budget: issue 21). A reservation whose
        rows are not all stored yet still counts, in their stead."""
        if not self._marks:
            return []
        stored = self._stored
        return [rid for rid, seen in self._marks.items() if seen <= stored]

    async def flush(self) -> None:
        """Store every row seen so far (and end the reservations settled); `StorageError` leaves them pending (a
        later flush writes them)."""
        async with self._lock:
            await self._store_recovered()
            await self._store_names()
            batch, self._pending = self._pending, []
            releases, self._releases = self._releases, []
            if not batch and not releases:
                return
            self._writing = len(batch)
            adding = self.store.add(batch, release=releases)
            written = asyncio.ensure_future(adding if batch else self.release_cpu.run(adding))
            try:  # a cancelled flush waits for the write's end: what it did decides (a write cut short could still
                await run_to_end(written)  # commit, and the rows written again would count twice)
            finally:
                self._writing = 0
                if succeeded(written):
                    self._stored += len(batch)  # no await since the write: a check sees its rows and releases together
                    for rid in releases:
                        self._marks.pop(rid, None)
                    if self.spool is not None:
                        self.spool.stored(len(batch), nothing_waits=not self._pending)
                else:
                    self._pending[:0] = batch
                    self._releases[:0] = releases

    def unname(self, channel: str, sender: str) -> None:
        """A forget of the sender: their name told so far is not stored, and is written again once they talk."""
        self._named.pop((channel, sender), None)
        self._names.pop((channel, sender), None)
        self._told.pop((channel, sender), None)

    async def _store_names(self) -> None:
        names, self._names = self._names, {}
        told, self._told = self._told, {}
        if not names:
            return
        try:
            await self.store.name_senders(names, told)
        except BaseException:
            self._names = {**names, **self._names}
            self._told = {**told, **self._told}
            raise

    async def _store_recovered(self) -> None:
        """A dead process's rows the store lacks (a kill between the store's write and the spool's note) are
        written, then its spool goes."""
        while self._recovered:
            path, rows = self._recovered[0]
            missing = await self.store.unrecorded(rows)
            if missing:
                await self.store.add(missing)
            log.info("usage_spool_replayed", rows=len(missing), already_stored=len(rows) - len(missing))
            forget_spool(path)
            self._recovered.pop(0)

    async def aclose(self) -> None:
        """Write what is pending (best effort) and stop the writer."""
        for hook in self.before_close:
            hook()
        try:
            await self.flush()
        except StorageError as e:
            log.warning("usage_not_stored_at_shutdown", rows=len(self._pending), error=str(e))
        if self.spool is not None:  # rows still waiting stay in the spool for the next start
            nothing_waits = not self._pending and not self._recovered
            await asyncio.to_thread(self.spool.close, nothing_waits=nothing_waits)  # waits for the spool's thread
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
            await asyncio.wait([self._writer])


def split(row: UsageRow, senders: tuple[str, ...]) -> list[UsageRow]:
    """A joined turn's call charged to its senders in equal shares (each kind; what does not divide evenly, the
    call itself and its `estimated` flag go to the newest sender, the row's own): the chat's, agent's and model's
    totals stay exactly the call's."""
    others = [s for s in senders if s != row.sender_id]
    if not others:
        return [row]
    n = len(others) + 1
    shares = {kind: getattr(row, kind) // n for kind in TOKEN_KINDS}
    rows = [dataclasses.replace(row, sender_id=s, calls=0, estimated=0, **shares) for s in others]
    rest = {kind: getattr(row, kind) - shares[kind] * len(others) for kind in TOKEN_KINDS}
    return [*rows, dataclasses.replace(row, **rest)]
