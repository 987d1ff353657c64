"""migrate_workspace_layout: the legacy single-agent layout moves to workspace/<agent>/, and a rerun is a no-op."""

from __future__ import annotations

import json
from pathlib import Path

from agenthub.storage.migrate import LAYOUT_MARKER, migrate_workspace_layout


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
    actions = migrate_workspace_layout(ws, agents)
    assert actions
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
    assert migrate_workspace_layout(ws, agents) == []
    assert _snapshot(tmp_path) == before


def test_after_migration_a_removed_agents_directory_is_left_alone(tmp_path: Path) -> None:
    ws, agents = _legacy_tree(tmp_path)
    migrate_workspace_layout(ws, agents)
    (ws / "retired").mkdir()
    (ws / "retired" / "secret.txt").write_text("belongs to an agent that no longer exists")
    (agents / "default" / "agent.json").write_text(json.dumps({"system_allowed_paths": [f"{ws}/shared"]}))
    assert migrate_workspace_layout(ws, agents) == []
    assert (ws / "retired" / "secret.txt").is_file()  # not swept into another agent's workspace
    assert _allowed(agents, "default") == [f"{ws}/shared"]


def test_fresh_machine_gets_the_default_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    assert migrate_workspace_layout(ws, tmp_path / "agents") == []
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
    assert migrate_workspace_layout(ws, agents) == []
    assert _snapshot(tmp_path) == before
