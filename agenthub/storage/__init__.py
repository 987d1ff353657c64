"""Files on disk: the per-agent layout, safe paths, JSONL history files and atomic writes."""
