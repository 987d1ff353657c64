"""Replay window for signed webhooks: a callback older than the dedup memory could recognise is refused."""

from __future__ import annotations

import time


def stale_reason(timestamp: str | None, window_s: float, now: float | None = None) -> str | None:
    """Why the signed `timestamp` (Unix seconds) is unacceptable, or None when it is within `window_s` of now.

    The window is the channel's dedup TTL: any callback accepted is then one whose message id the dedup store
    still remembers, so a captured request replayed later is refused instead of answered a second time."""
    try:
        sent_at = int(timestamp or "")
    except ValueError:
        return "timestamp is missing or not a number"
    skew = (time.time() if now is None else now) - sent_at
    if abs(skew) > window_s:
        return f"timestamp is {skew:+.0f} s from now, outside the {window_s:.0f} s replay window"
    return None
