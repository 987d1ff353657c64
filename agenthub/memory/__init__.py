"""The memory layer behind `host.MemoryHost`: memory files, compaction (L2 after a turn, on request, AutoCompact
when idle) and L3 memory processing."""
