"""Run mypy (strict, the project's configuration) on a probe file: for tests of what the type checker must still see."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO


def mypy_says(tmp_path: Path, source: str) -> str:
    """mypy's report on `source` (written to a probe file under `tmp_path`, with a cache of its own there)."""
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    config = ["--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp_path / "mypy-cache")]
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *config, str(probe)]
    checked = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    return checked.stdout
