"""Sessions: the history cache and per-key serialisation over the store."""
