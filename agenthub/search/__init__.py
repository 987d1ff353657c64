"""Keyword search over an agent's histories, archives and memory files (the `memory_search` platform tool)."""
