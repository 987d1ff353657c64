"""How to spell the `agenthub` command in a hint: the path it was started from when that is not on PATH."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

DEFAULT_COMMAND = "agenthub"


def command_name(argv0: str | None = None, *, cwd: Path | None = None, search_path: str | None = None) -> str:
    """The command a user should type to run agenthub again, e.g. `.venv/bin/agenthub` after `make run`.

    `argv0` (default `sys.argv[0]`) is used when it is a file and `agenthub` on the PATH (`search_path`, default
    $PATH) is not that same file; it is shown relative to `cwd` when it lies below it. Otherwise `agenthub`.
    """
    script = Path(sys.argv[0] if argv0 is None else argv0)
    here = Path.cwd() if cwd is None else cwd
    absolute = script if script.is_absolute() else here / script
    if absolute.name == "__main__.py" or not absolute.is_file():  # `python -m agenthub`, or unknown
        return DEFAULT_COMMAND
    on_path = shutil.which(DEFAULT_COMMAND, path=search_path)
    if on_path is not None and _same_file(Path(on_path), absolute):
        return DEFAULT_COMMAND
    shown = Path(os.path.normpath(absolute))
    if shown.is_relative_to(here):
        relative = str(shown.relative_to(here))
        return shlex.quote(relative if os.sep in relative else f".{os.sep}{relative}")
    return shlex.quote(str(shown))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False
