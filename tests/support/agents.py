"""Writing agent folders (agent.json and AGENTS.md) for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_agent(agents_dir: Path, name: str, config: dict[str, Any] | None = None, persona: str = "") -> Path:
    """Create `agents/<name>/` with an agent.json and AGENTS.md."""
    import json

    directory = agents_dir / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "agent.json").write_text(json.dumps(config or {}), encoding="utf-8")
    (directory / "AGENTS.md").write_text(persona or f"You are the {name} agent.", encoding="utf-8")
    return directory
