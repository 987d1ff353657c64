"""`command_name()`: hints name the agenthub the user started, unless plain `agenthub` on PATH is that one."""

from __future__ import annotations

from pathlib import Path

from agenthub.invocation import command_name


def _script(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def test_a_venv_script_off_path_is_shown_relative_to_the_cwd(tmp_path: Path) -> None:
    script = _script(tmp_path / ".venv" / "bin" / "agenthub")
    empty = str(tmp_path / "nothing-here")
    assert command_name(str(script), cwd=tmp_path, search_path=empty) == ".venv/bin/agenthub"
    assert command_name(".venv/bin/agenthub", cwd=tmp_path, search_path=empty) == ".venv/bin/agenthub"
    assert command_name(str(script), cwd=tmp_path / ".venv", search_path=empty) == "bin/agenthub"
    assert command_name(str(script), cwd=script.parent, search_path=empty) == "./agenthub"


def test_plain_agenthub_when_path_finds_the_same_script(tmp_path: Path) -> None:
    script = _script(tmp_path / ".venv" / "bin" / "agenthub")
    other = _script(tmp_path / "elsewhere" / "agenthub")
    assert command_name(str(script), cwd=tmp_path, search_path=str(script.parent)) == "agenthub"
    assert command_name(str(script), cwd=tmp_path, search_path=str(other.parent)) == ".venv/bin/agenthub"


def test_a_script_outside_the_cwd_is_shown_absolute_and_quoted(tmp_path: Path) -> None:
    script = _script(tmp_path / "my tools" / "bin" / "agenthub")
    cwd = tmp_path / "project"
    cwd.mkdir()
    assert command_name(str(script), cwd=cwd, search_path="") == f"'{script}'"


def test_plain_agenthub_when_argv0_is_not_a_runnable_script(tmp_path: Path) -> None:
    main_module = _script(tmp_path / "agenthub" / "__main__.py")  # `python -m agenthub`
    assert command_name(str(main_module), cwd=tmp_path, search_path="") == "agenthub"
    assert command_name("agenthub", cwd=tmp_path, search_path="") == "agenthub"
    assert command_name("", cwd=tmp_path, search_path="") == "agenthub"
