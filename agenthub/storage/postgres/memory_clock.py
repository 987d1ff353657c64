"""`MemoryClock`: the newest memory version (migration 25) an instance's statements brought back, and since when
it is known, so the memory files read at that version can be served without asking again."""

from __future__ import annotations

VERSION = "(SELECT version FROM memory_clock)"
"""The memory version in the snapshot of the statement it is part of."""


class MemoryClock:
    """What this instance last learnt of the memory version. A statement stamped (monotonic clock) before it was
    sent, whose snapshot brought back version V, tells that every change committed before the stamp is counted in
    V: the snapshot was taken after it. The trigger's row lock orders the changes, so a later snapshot never sees a
    smaller version; an answer with a smaller one (a slow statement) tells nothing new and is ignored."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.since = float("-inf")
        """The newest stamp of a statement that brought `version` back."""

    def learnt(self, version: int, stamp: float) -> None:
        if self.version is None or version > self.version:
            self.version, self.since = version, stamp
        elif version == self.version:
            self.since = max(self.since, stamp)

    def version_since(self, stamp: float) -> int | None:
        """The version, when a statement sent at or after `stamp` brought it back (every change committed before
        `stamp` is counted in it); None when none has since."""
        return self.version if self.version is not None and self.since >= stamp else None
