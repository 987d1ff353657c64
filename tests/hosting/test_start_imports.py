"""What `agenthub serve` imports before READY: not numpy (the search index and the vectors load it when they are
opened or configured), the import of which was a good part of a cold start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

START_PATH = (
    "agenthub.cli",
    "agenthub.cli.forget",
    "agenthub.hosting.daemon",
    "agenthub.hosting.app",
    "agenthub.gateway.core",
    "agenthub.search.service",
    "agenthub.search.vector_wiring",
    "agenthub.forget.index",
)


def test_the_start_up_path_does_not_import_numpy(tmp_path: Path) -> None:
    code = f"import sys\nfor name in {START_PATH!r}:\n    __import__(name)\nprint('numpy' in sys.modules)\n"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    search = "import sys\nimport agenthub.storage.search_files as f\nf.FileSearchIndexStore\n"
    opened = subprocess.run(
        [sys.executable, "-c", search + "import agenthub.storage.search_sqlite\nprint('numpy' in sys.modules)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert opened.stdout.strip() == "True", opened.stderr  # the index itself still has it
