"""migrate_workspace_layout: the legacy single-agent layout moves to workspace/<agent>/, and a rerun is a no-op."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agenthub.cli import main
from agenthub.storage.migrate import LAYOUT_MARKER, migrate_workspace_layout
from tests.support.paths import REPO


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _legacy_tree(root: Path) -> tuple[Path, Path]:
    ws, agents = root / "workspace", root / "agents"
    (ws / "proj").mkdir(parents=True)
    (ws / "notes.txt").write_text("loose file")
    (ws / "proj" / "main.py").write_text("print(1)")
    (ws / ".hidden").write_text("dotfile")
    (root / "workspace_reviewer" / "docs").mkdir(parents=True)
    (root / "workspace_reviewer" / "docs" / "a.md").write_text("review notes")
    (root / "workspace_backup.tar").write_text("not a directory, not an agent")
    for name, paths in {
        "default": [str(ws), f"{ws}/proj"],
        "reviewer": [f"{root}/workspace_reviewer/docs", f"{ws}/reviewer", "/srv/shared"],
    }.items():
        (agents / name).mkdir(parents=True)
        (agents / name / "agent.json").write_text(json.dumps({"name": name, "system_allowed_paths": paths}))
    return ws, agents


def _allowed(agents: Path, name: str) -> list[str]:
    data = json.loads((agents / name / "agent.json").read_text())
    return list(data["system_allowed_paths"])


def test_legacy_tree_is_migrated(tmp_path: Path) -> None:
    ws, agents = _legacy_tree(tmp_path)
    report = migrate_workspace_layout(ws, agents)
    assert report.done and report.complete
    assert (ws / "default" / "notes.txt").read_text() == "loose file"
    assert (ws / "default" / "proj" / "main.py").read_text() == "print(1)"
    assert (ws / "default" / ".hidden").read_text() == "dotfile"
    assert (ws / "reviewer" / "docs" / "a.md").read_text() == "review notes"
    assert not (tmp_path / "workspace_reviewer").exists()
    assert (tmp_path / "workspace_backup.tar").is_file() and not (ws / "backup.tar").exists()
    assert sorted(p.name for p in ws.iterdir()) == sorted([LAYOUT_MARKER, "default", "reviewer"])
    assert _allowed(agents, "default") == [f"{ws}/default", f"{ws}/default/proj"]
    assert _allowed(agents, "reviewer") == [f"{ws}/reviewer/docs", f"{ws}/reviewer", "/srv/shared"]


def test_second_run_changes_nothing(tmp_path: Path) -> None:
    ws, agents = _legacy_tree(tmp_path)
    migrate_workspace_layout(ws, agents)
    before = _snapshot(tmp_path)
    assert migrate_workspace_layout(ws, agents).done == []
    assert _snapshot(tmp_path) == before


def test_after_migration_a_removed_agents_directory_is_left_alone(tmp_path: Path) -> None:
    ws, agents = _legacy_tree(tmp_path)
    migrate_workspace_layout(ws, agents)
    (ws / "retired").mkdir()
    (ws / "retired" / "secret.txt").write_text("belongs to an agent that no longer exists")
    (agents / "default" / "agent.json").write_text(json.dumps({"system_allowed_paths": [f"{ws}/shared"]}))
    assert migrate_workspace_layout(ws, agents).done == []
    assert (ws / "retired" / "secret.txt").is_file()  # not swept into another agent's workspace
    assert _allowed(agents, "default") == [f"{ws}/shared"]


def test_fresh_machine_gets_the_default_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    assert migrate_workspace_layout(ws, tmp_path / "agents").done == []
    assert (ws / "default").is_dir() and (ws / LAYOUT_MARKER).is_file()


def test_a_conflict_is_left_in_place_not_overwritten(tmp_path: Path) -> None:
    ws, agents = _legacy_tree(tmp_path)
    (ws / "reviewer").mkdir()
    (ws / "reviewer" / "docs").mkdir()
    (ws / "reviewer" / "docs" / "a.md").write_text("newer")
    migrate_workspace_layout(ws, agents)
    assert (ws / "reviewer" / "docs" / "a.md").read_text() == "newer"
    assert (tmp_path / "workspace_reviewer" / "docs" / "a.md").read_text() == "review notes"
    before = _snapshot(tmp_path)
    assert migrate_workspace_layout(ws, agents).done == []
    assert _snapshot(tmp_path) == before


READ_ONLY_INSTALL = """
for d in data auth workspace; do mount --bind "$ROOT/$d" "$ROOT/$d"; done
mount --rbind "$ROOT" "$ROOT" && mount -o remount,bind,ro "$ROOT"
exec "$@"
"""
"""How the test makes the install directory read-only: the hardened unit's `ProtectSystem=strict` plus
`ReadWritePaths=data auth workspace`, rebuilt with mount(8) in a private mount namespace (`unshare --mount`, so
nothing leaks to the host): data/, auth/ and workspace/ become their own writable bind mounts, then the install
directory is bind-mounted over itself and remounted read-only. Root gets EROFS there like anyone (permission bits
would not stop root), and a rename from the read-only part into workspace/ crosses mounts (EXDEV), as under systemd."""


def _env(root: Path, port: int) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "PYTHONPATH": str(REPO),
        "ROOT": str(root),
        "NO_PROXY": "127.0.0.1,localhost",
        "AGENTHUB_DATA_DIR": str(root / "data"),
        "AGENTHUB_AGENTS_DIR": str(root / "agents"),
        "AGENTHUB_AUTH_DIR": str(root / "auth"),
        "AGENTHUB_WORKSPACE_DIR": str(root / "workspace"),
        "AGENTHUB_HTTP__PORT": str(port),
        "AGENTHUB_LOG_FORMAT": "json",
    }


async def _serve_read_only_until_ready(root: Path) -> list[dict[str, Any]]:
    """`agenthub serve` on a read-only install: wait for /readyz, stop it with SIGTERM, return its log events."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = await asyncio.create_subprocess_exec(
        "unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY_INSTALL, "sh",
        sys.executable, "-m", "agenthub", "serve",
        env=_env(root, port), cwd=root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    ready = False
    async with aiohttp.ClientSession() as client:
        for _ in range(300):  # up to 30 s for a slow, shared machine
            if proc.returncode is not None:
                break
            try:
                async with client.get(f"http://127.0.0.1:{port}/readyz") as resp:
                    if resp.status == 200:
                        ready = True
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    assert proc.stdout is not None
    output = (await asyncio.wait_for(proc.stdout.read(), 30)).decode()
    code = await asyncio.wait_for(proc.wait(), 30)
    assert ready and code == 0, output
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


async def _migrate_cli(root: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "migrate",
        env=_env(root, 0), cwd=root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_serve_starts_on_a_read_only_install_and_agenthub_migrate_finishes(tmp_path: Path) -> None:
    ws, agents = _legacy_tree(tmp_path)
    for name in ("data", "auth"):
        (tmp_path / name).mkdir()
    reviewer_json = (agents / "reviewer" / "agent.json").read_bytes()

    events = await _serve_read_only_until_ready(tmp_path)
    assert (ws / "default" / "notes.txt").read_text() == "loose file"  # workspace/ is writable: that part is done
    assert (tmp_path / "workspace_reviewer" / "docs" / "a.md").read_text() == "review notes"  # not copied half-way
    assert not (ws / "reviewer" / "docs").exists()
    assert (agents / "reviewer" / "agent.json").read_bytes() == reviewer_json
    incomplete = [e for e in events if e["event"] == "workspace_migration_incomplete"]
    assert len(incomplete) == 1, events  # one line, with what is left and the command that finishes it
    assert "agenthub migrate" in incomplete[0]["hint"] and incomplete[0]["pending"]

    code, out = await _migrate_cli(tmp_path)  # the operator, who may write the install directory
    assert code == 0, out
    assert (ws / "reviewer" / "docs" / "a.md").read_text() == "review notes"
    assert not (tmp_path / "workspace_reviewer").exists()
    assert _allowed(agents, "default") == [f"{ws}/default", f"{ws}/default/proj"]
    assert _allowed(agents, "reviewer") == [f"{ws}/reviewer/docs", f"{ws}/reviewer", "/srv/shared"]
    assert await _migrate_cli(tmp_path) == (0, "agenthub migrate: nothing to do\n")

    (tmp_path / "workspace_late").mkdir()  # once done, a start no longer scans or writes outside workspace/
    events = await _serve_read_only_until_ready(tmp_path)
    assert not [e for e in events if e["event"].startswith("workspace_migration")], events
    assert (tmp_path / "workspace_late").is_dir()


def test_agenthub_migrate_says_which_entry_it_left_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A conflict is not moved; `agenthub migrate` shows the migration's warning for it on stderr, one line (as
    `agenthub store migrate` shows the stores' warnings), said once."""
    ws, _ = _legacy_tree(tmp_path)
    (ws / "reviewer" / "docs").mkdir(parents=True)
    (ws / "reviewer" / "docs" / "a.md").write_text("newer")
    for key, name in {"DATA": "data", "AGENTS": "agents", "AUTH": "auth", "WORKSPACE": "workspace"}.items():
        monkeypatch.setenv(f"AGENTHUB_{key}_DIR", str(tmp_path / name))
    monkeypatch.chdir(tmp_path)
    assert main(["migrate"]) == 0
    captured = capsys.readouterr()
    source, target = tmp_path / "workspace_reviewer" / "docs", ws / "reviewer" / "docs"
    assert captured.err.splitlines() == [
        f"agenthub: warning: migration_conflict_left_in_place source={source} target={target}"
    ], captured
    assert "left_in_place" not in captured.out
    assert (tmp_path / "workspace_reviewer" / "docs" / "a.md").read_text() == "review notes"
