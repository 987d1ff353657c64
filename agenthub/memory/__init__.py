"""The memory layer: memory files, context building, L2 consolidation, L3 memory processing, AutoCompact."""
