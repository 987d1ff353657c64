"""`KeepJudge`: whether the sessions of one kind that an instance keeps idle after a turn come back to it;
`KeepJudges`: the new and the returning ones, each starting from whether another instance is alive."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars

import structlog

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey
from agenthub.storage.lease import INSTANCE_LEASE_PREFIX
from agenthub.storage.ports import LiveHolders

log = structlog.get_logger(__name__)

STAY_WEIGHT = 0.25
KEEP_AT = 0.5
PROBE_EVERY = 8
"""Sessions of a kind are kept after a turn while at least half of those kept came back here (a moving average,
each verdict weighing a quarter): kept, one whose next message goes elsewhere costs a hand-over (asked, let go,
claimed again) where a let-go with its answer costs nothing on the way. Below it, every eighth is kept all the
same, so the instance learns when its routing turns sticky again."""
ASK_FRACTION = 3
"""Who is alive is asked every `ttl_s / 3` (an instance's lease is renewed at that pace: a peer that just started is
seen within it) for at least `ttl_s` and a third (the lease a crashed predecessor of this process left, which looks
alive until it expires, is seen gone), then until both kinds have a verdict."""
FIRST_ANSWER_WAIT_S = 1.0
"""How long a claim waits, at most, for the first answer of who is alive while it is out (`KeepJudges.first_answer`):
a store that answered the claim answers this in milliseconds; one that does not holds no turn longer."""


class KeepJudge:
    """The verdicts on one kind of kept session: each kept one is judged once, by its next claim here (it came
    back) or another instance's ask (it moved on); one let go unasked (idle too long, closing) is not judged."""

    def __init__(self) -> None:
        self.rate = 1.0
        """How often a session of this kind kept here came back here (moving average, `STAY_WEIGHT`)."""
        self.verdicts = 0
        self._seen = 0
        self._judged: set[SessionKey] = set()

    def keeps(self) -> bool:
        """Whether the next session of this kind is kept: while kept ones came back (`KEEP_AT`), and every
        `PROBE_EVERY`th all the same."""
        self._seen += 1
        return self.rate >= KEEP_AT or self._seen % PROBE_EVERY == 0

    @property
    def keeping(self) -> bool:
        """Whether sessions of this kind are kept now (besides the probes)."""
        return self.rate >= KEEP_AT

    def kept(self, key: SessionKey) -> None:
        self._judged.add(key)

    def judge(self, key: SessionKey, *, stayed: bool) -> None:
        if key in self._judged:
            self._judged.discard(key)
            self.verdicts += 1
            self.rate += STAY_WEIGHT * ((1.0 if stayed else 0.0) - self.rate)

    def forget(self, key: SessionKey) -> None:
        self._judged.discard(key)

    def expect(self, *, others_alive: bool) -> None:
        """What the instances alive say of kept sessions: alone, that they come back (nothing else can take them,
        whatever the verdicts before); among others, before the first verdict, that they do not (a wrong keep
        costs the session's next turn a hand-over, a wrong let-go one claim; the probes then tell)."""
        if not others_alive:
            self.rate = 1.0
        elif self.verdicts == 0:
            self.rate = 0.0


class KeepJudges:
    """The verdicts on the sessions an instance keeps: `new` ones (kept after their first turn) and `returning`
    ones (kept after a turn that found them as the instance left them). Over a store that lists the instances
    alive (`LiveHolders`), each kind starts from whether another one is (`KeepJudge.expect`): asked when `watch`
    is first called (the gateway's start; else the first claim) and every `ttl_s / 3` after (`ASK_FRACTION`); a
    claim judged while the first answer is out waits for it (`first_answer`). Behind a round-robin balancer, the
    first sessions after a start then cost no hand-over each."""

    def __init__(self, holders: LiveHolders | None, holder: str, ttl_s: float) -> None:
        self.new = KeepJudge()
        self.returning = KeepJudge()
        self._holders = holders
        self._holder = holder
        self._every_s = ttl_s / ASK_FRACTION
        self._first_wait_s = min(FIRST_ANSWER_WAIT_S, self._every_s)
        self._for_at_least_s = ttl_s + self._every_s
        self.asked = 0
        """How many times the store told who is alive."""
        self._watch: asyncio.Task[None] | None = None
        self._answered: asyncio.Event | None = None
        """The watch's first ask has its answer or its error (or the watch ended, or a claim waited for it in
        vain): made by `watch`, on the loop that runs it."""

    def of(self, *, new: bool) -> KeepJudge:
        return self.new if new else self.returning

    def judge(self, key: SessionKey, *, stayed: bool) -> None:
        self.new.judge(key, stayed=stayed)
        self.returning.judge(key, stayed=stayed)

    def forget(self, key: SessionKey) -> None:
        self.new.forget(key)
        self.returning.forget(key)

    def watch(self) -> None:
        """Start asking who is alive (once; nothing over a store that cannot tell)."""
        if self._holders is not None and self._watch is None:
            answered = self._answered = asyncio.Event()
            watching = self._watching(self._holders, answered)  # its own context: its log lines carry no turn's ids
            self._watch = asyncio.create_task(watching, name="keep-judges-peers", context=contextvars.Context())
            self._watch.add_done_callback(lambda _: answered.set())  # ended (closed, failed): no more waits

    async def first_answer(self) -> None:
        """Until the watch's first ask has its answer or its error, at most `FIRST_ANSWER_WAIT_S` (and `ttl_s / 3`),
        once: a wait in vain ends the waits of every claim after it. At once when it came, or nothing asks (not
        watching)."""
        answered = self._answered
        if self._watch is None or answered is None or answered.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._first_wait_s):
                await answered.wait()
                return
        answered.set()  # the store is slow to say: the claims after this one go on as they are
        log.warning("keep_judges_peers_late", waited_s=self._first_wait_s)

    async def _watching(self, holders: LiveHolders, answered: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + self._for_at_least_s
        while loop.time() < until or self.new.verdicts == 0 or self.returning.verdicts == 0:
            try:
                alive = await holders.live_holders(INSTANCE_LEASE_PREFIX)
            except StorageError as e:  # asked again next time; meanwhile each kind goes on as it was
                log.warning("keep_judges_peers_unknown", error=str(e))
            else:
                self.asked += 1
                others_alive = any(holder != self._holder for holder in alive)
                self.new.expect(others_alive=others_alive)
                self.returning.expect(others_alive=others_alive)
            answered.set()
            await asyncio.sleep(self._every_s)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.wait([self._watch])
            self._watch = None
