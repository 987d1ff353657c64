"""`SearchTraffic`: the searches under way on a files index store, which its background merges give way to."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class SearchTraffic:
    """The searches under way on an index store, counted from any thread; its merges give way to them."""

    def __init__(self) -> None:
        self._searches = 0
        self._quiet = threading.Condition()

    @contextmanager
    def searching(self) -> Iterator[None]:
        """A search is under way (nested ones count once each)."""
        with self._quiet:
            self._searches += 1
        try:
            yield
        finally:
            with self._quiet:
                self._searches -= 1
                if not self._searches:
                    self._quiet.notify_all()

    @property
    def busy(self) -> bool:
        return self._searches > 0

    def give_way(self, most: float) -> bool:
        """Wait until no search is under way, `most` seconds at most; False when one still is."""
        with self._quiet:
            return self._quiet.wait_for(lambda: not self._searches, most)
