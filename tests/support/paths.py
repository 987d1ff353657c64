"""Where things are on disk, for tests that run scripts or read files: computed once here, not per test file."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO = TESTS.parent
DATA = TESTS / "data"
MCP_SERVER_SCRIPT = SUPPORT / "fakes" / "mcp_server.py"
CRASH_WRITER_SCRIPT = SUPPORT / "crash_writer.py"


def plant(root: Path, files: dict[str, str]) -> None:
    """Write a small source tree under `root`: relative path → text (for the import rules' own tests)."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
