"""The first `make run` shows what it installs and how far it is: numbered steps, pip not silenced."""

from __future__ import annotations

import re
import shutil
import subprocess

from tests.support.paths import REPO


def test_the_install_steps_are_numbered_and_pip_shows_what_it_fetches() -> None:
    make = shutil.which("make")
    assert make is not None, "make is needed for `make run`"
    dry = subprocess.run(  # -n: print the recipe only, run nothing; -B: as on a fresh clone
        [make, "-n", "-B", "-C", str(REPO), ".venv/.installed"], capture_output=True, text=True, check=True, timeout=60
    )
    lines = dry.stdout.splitlines()
    steps = [m.group(1) for line in lines if (m := re.search(r"==> \[(\d)/3\]", line))]
    assert steps == ["1", "2", "3"], dry.stdout
    installs = [line for line in lines if "pip install" in line]
    assert len(installs) == 2, dry.stdout
    assert not any(re.search(r"\s-q\b|--quiet", line) for line in installs), installs
