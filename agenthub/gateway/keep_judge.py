"""`KeepJudge`: whether the sessions of one kind that an instance keeps idle after a turn come back to it."""

from __future__ import annotations

from agenthub.session_keys import SessionKey

STAY_WEIGHT = 0.25
KEEP_AT = 0.5
PROBE_EVERY = 8
"""Sessions of a kind are kept after a turn while at least half of those kept came back here (a moving average,
each verdict weighing a quarter): kept, one whose next message goes elsewhere costs a hand-over (asked, let go,
claimed again) where a let-go with its answer costs nothing on the way. Below it, every eighth is kept all the
same, so the instance learns when its routing turns sticky again."""


class KeepJudge:
    """The verdicts on one kind of kept session: each kept one is judged once, by its next claim here (it came
    back) or another instance's ask (it moved on); one let go unasked (idle too long, closing) is not judged."""

    def __init__(self) -> None:
        self.rate = 1.0
        """How often a session of this kind kept here came back here (moving average, `STAY_WEIGHT`)."""
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
            self.rate += STAY_WEIGHT * ((1.0 if stayed else 0.0) - self.rate)

    def forget(self, key: SessionKey) -> None:
        self._judged.discard(key)
