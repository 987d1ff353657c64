"""The daemon's start-up objects leave the collector's generations: a full collection no longer walks them."""

from __future__ import annotations

import gc

from agenthub.hosting.gc_freeze import freeze_start_up_objects


def test_the_objects_alive_at_the_freeze_are_no_longer_walked_by_a_collection() -> None:
    kept = [[i] for i in range(1000)]
    try:
        freeze_start_up_objects()
        assert gc.get_freeze_count() >= len(kept)
        assert not any(o is kept for o in gc.get_objects())  # the permanent generation is not listed
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())
