"""Sessions: keys, history, meta and the in-memory session manager."""
