"""Start-up migration of the legacy single-agent workspace layout to `workspace/<agent>/` (idempotent)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import structlog

from agenthub.errors import InvalidIdError
from agenthub.session.keys import validate_agent_name
from agenthub.storage.atomic import atomic_write_text

log = structlog.get_logger(__name__)

DEFAULT_AGENT = "default"
LAYOUT_MARKER = ".agenthub-layout"
"""Written into `workspace/` once it has the per-agent layout: from then on a directory there that is not
(or no longer) an agent is left alone instead of being mistaken for a legacy loose file."""


def _is_agent_name(name: str) -> bool:
    try:
        validate_agent_name(name)
    except InvalidIdError:
        return False
    return True


def _legacy_sibling_names(workspace: Path) -> set[str]:
    prefix = workspace.name + "_"
    return {
        p.name[len(prefix) :]
        for p in workspace.parent.glob(prefix + "*")
        if p.is_dir() and _is_agent_name(p.name[len(prefix) :])
    }


def _agent_names(agents_dir: Path) -> set[str]:
    names = {DEFAULT_AGENT}
    if agents_dir.is_dir():
        names.update(p.name for p in agents_dir.iterdir() if p.is_dir() and _is_agent_name(p.name))
    return names


def _move_into(source: Path, target_dir: Path, actions: list[str]) -> None:
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / source.name
    if target.exists():
        log.warning("migration_conflict_left_in_place", source=str(source), target=str(target))
        return
    shutil.move(str(source), str(target))
    actions.append(f"moved {source} -> {target}")


def _migrate_loose_files(workspace: Path, agents: set[str], actions: list[str]) -> None:
    if not workspace.is_dir():
        return
    for entry in sorted(workspace.iterdir()):
        if (entry.is_dir() and entry.name in agents) or entry.name == LAYOUT_MARKER:
            continue
        _move_into(entry, workspace / DEFAULT_AGENT, actions)


def _migrate_sibling_workspaces(workspace: Path, actions: list[str]) -> list[str]:
    moved_agents = []
    parent = workspace.parent
    prefix = workspace.name + "_"
    for legacy in sorted(parent.glob(prefix + "*")):
        name = legacy.name[len(prefix) :]
        if not legacy.is_dir() or not _is_agent_name(name):
            continue
        target = workspace / name
        for entry in sorted(legacy.iterdir()):
            _move_into(entry, target, actions)
        if not any(legacy.iterdir()):
            legacy.rmdir()
            actions.append(f"removed empty {legacy}")
        moved_agents.append(name)
    return moved_agents


def rewrite_allowed_path(path: str, workspace: Path, agents: set[str], *, loose: bool = True) -> str:
    """Map a legacy `system_allowed_paths` entry to the per-agent layout; new-layout paths are unchanged.

    `loose=False` (the layout is already migrated) rewrites only the unambiguous `workspace_<name>` form.
    """
    for base in {str(workspace), str(workspace.resolve())}:
        base = base.rstrip("/")
        legacy_prefix = base + "_"
        if path.startswith(legacy_prefix) and _is_agent_name(path[len(legacy_prefix) :].split("/", 1)[0]):
            rest = path[len(legacy_prefix) :]
            return f"{base}/{rest}"
        if not loose:
            continue
        if path == base:
            return f"{base}/{DEFAULT_AGENT}"
        if path.startswith(base + "/"):
            first = path[len(base) + 1 :].split("/", 1)[0]
            if first not in agents:
                return f"{base}/{DEFAULT_AGENT}/{path[len(base) + 1 :]}"
    return path


def _rewrite_agent_json(
    agents_dir: Path, workspace: Path, agents: set[str], actions: list[str], *, loose: bool
) -> None:
    for agent_json in sorted(agents_dir.glob("*/agent.json")):
        try:
            data: dict[str, Any] = json.loads(agent_json.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a broken definition is reported by the agent loader, not here
        paths = data.get("system_allowed_paths")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            continue
        new_paths = [rewrite_allowed_path(p, workspace, agents, loose=loose) for p in paths]
        if new_paths != paths:
            data["system_allowed_paths"] = new_paths
            atomic_write_text(agent_json, json.dumps(data, ensure_ascii=False, indent=2) + "\n")
            actions.append(f"rewrote system_allowed_paths in {agent_json}")


def migrate_workspace_layout(workspace_dir: Path, agents_dir: Path) -> list[str]:
    """Move `workspace/` loose files to `workspace/default/` and `workspace_<name>/` to `workspace/<name>/`.

    Also rewrites `system_allowed_paths` prefixes in every `agent.json` and makes sure each agent has its
    workspace directory. Loose entries are moved only while `workspace/` has no layout marker, so a later
    directory of a removed agent is never swept into `default`. Returns what was done; a second run
    returns an empty list.
    """
    actions: list[str] = []
    agents = _agent_names(agents_dir) | _legacy_sibling_names(workspace_dir)
    marker = workspace_dir / LAYOUT_MARKER
    legacy_root = not marker.exists()
    if legacy_root:
        _migrate_loose_files(workspace_dir, agents, actions)
    _migrate_sibling_workspaces(workspace_dir, actions)
    _rewrite_agent_json(agents_dir, workspace_dir, agents, actions, loose=legacy_root)
    for name in sorted(agents):
        (workspace_dir / name).mkdir(parents=True, exist_ok=True)
    if legacy_root:
        atomic_write_text(marker, "per-agent workspace layout (agenthub); see design §4\n")
    for action in actions:
        log.info("workspace_migrated", action=action)
    return actions
