"""The replay window of signed webhooks: inside the dedup memory's TTL or refused, in both directions."""

from __future__ import annotations

from channels.toolkit.replay import stale_reason


def test_inside_the_window_is_accepted_either_side_of_now() -> None:
    assert stale_reason("1000", 60, now=1000) is None
    assert stale_reason("940", 60, now=1000) is None
    assert stale_reason("1060", 60, now=1000) is None


def test_outside_the_window_is_refused_with_the_skew() -> None:
    old = stale_reason("900", 60, now=1000)
    assert old is not None and "+100 s" in old and "replay window" in old
    future = stale_reason("1100", 60, now=1000)
    assert future is not None and "-100 s" in future


def test_a_missing_or_malformed_timestamp_is_refused() -> None:
    for bad in (None, "", "12a", "1.5"):
        assert stale_reason(bad, 60, now=1000) is not None
