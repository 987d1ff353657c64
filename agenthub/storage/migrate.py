"""Start-up migration of the legacy single-agent workspace layout to `workspace/<agent>/` (idempotent)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agenthub.errors import InvalidIdError
from agenthub.invocation import command_name
from agenthub.session_keys import validate_agent_name
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


@dataclass
class MigrationReport:
    """What a migration run did and what it could not do (each `pending` entry: what, then why)."""

    done: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    """Entries not moved because the target already exists (kept both; someone has to merge them by hand)."""

    @property
    def complete(self) -> bool:
        return not self.pending

    def failed(self, what: str, error: OSError) -> None:
        self.pending.append(f"{what}: {error.strerror or error}")


def _move(source: Path, target: Path) -> None:
    """Rename `source` to `target`; across file systems (or mounts) copy and remove, but only when the original
    can be removed afterwards: a copy that leaves the original behind would split the workspace in two."""
    try:
        os.rename(source, target)
        return
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
    if not os.access(source.parent, os.W_OK):
        raise OSError(errno.EROFS, "the original cannot be removed after a copy", str(source.parent))
    shutil.move(str(source), str(target))


def _move_into(source: Path, target_dir: Path, report: MigrationReport) -> None:
    target = target_dir / source.name
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        if target.exists():
            log.warning("migration_conflict_left_in_place", source=str(source), target=str(target))
            report.left.append(f"{source} (left in place: {target} already exists)")
            return
        _move(source, target)
    except OSError as e:
        report.failed(f"move {source} -> {target}", e)
        return
    report.done.append(f"moved {source} -> {target}")


def _migrate_loose_files(workspace: Path, agents: set[str], report: MigrationReport) -> None:
    if not workspace.is_dir():
        return
    for entry in sorted(workspace.iterdir()):
        if (entry.is_dir() and entry.name in agents) or entry.name == LAYOUT_MARKER:
            continue
        _move_into(entry, workspace / DEFAULT_AGENT, report)


def _migrate_sibling_workspaces(workspace: Path, report: MigrationReport) -> None:
    parent = workspace.parent
    prefix = workspace.name + "_"
    for legacy in sorted(parent.glob(prefix + "*")):
        name = legacy.name[len(prefix) :]
        if not legacy.is_dir() or not _is_agent_name(name):
            continue
        target = workspace / name
        for entry in sorted(legacy.iterdir()):
            _move_into(entry, target, report)
        if any(legacy.iterdir()):
            continue
        try:
            legacy.rmdir()
        except OSError as e:
            report.failed(f"remove empty {legacy}", e)
        else:
            report.done.append(f"removed empty {legacy}")


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
    agents_dir: Path, workspace: Path, agents: set[str], report: MigrationReport, *, loose_for: Callable[[str], bool]
) -> list[str]:
    """Rewrite legacy `system_allowed_paths`; returns the agents whose agent.json could not be written.

    `loose_for(agent)` says whether that agent's definition still predates the move of the loose files."""
    failed: list[str] = []
    for agent_json in sorted(agents_dir.glob("*/agent.json")):
        try:
            data: dict[str, Any] = json.loads(agent_json.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a broken definition is reported by the agent loader, not here
        paths = data.get("system_allowed_paths")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            continue
        agent = agent_json.parent.name
        new_paths = [rewrite_allowed_path(p, workspace, agents, loose=loose_for(agent)) for p in paths]
        if new_paths == paths:
            continue
        data["system_allowed_paths"] = new_paths
        try:
            atomic_write_text(agent_json, json.dumps(data, ensure_ascii=False, indent=2) + "\n")
        except OSError as e:
            report.failed(f"rewrite system_allowed_paths in {agent_json}", e)
            failed.append(agent)
        else:
            report.done.append(f"rewrote system_allowed_paths in {agent_json}")
    return failed


@dataclass(frozen=True)
class _Marker:
    """`workspace/.agenthub-layout`: present once the loose files are moved. `complete` once nothing is left;
    `loose_rewrites` names agents whose agent.json could not be rewritten yet and still has pre-move paths."""

    complete: bool = False
    loose_rewrites: tuple[str, ...] = ()


def _read_marker(path: Path) -> _Marker | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return _Marker()  # written by an older version: the loose files were moved; check the rest again
    if not isinstance(data, dict):
        return _Marker()
    pending = data.get("loose_rewrites", [])
    names = tuple(str(n) for n in pending) if isinstance(pending, list) else ()
    return _Marker(complete=data.get("complete") is True, loose_rewrites=names)


def _write_marker(path: Path, marker: _Marker, report: MigrationReport) -> None:
    text = json.dumps({"layout": "per-agent (agenthub; design §4)", **asdict(marker)})
    try:
        atomic_write_text(path, text + "\n")
    except OSError as e:
        report.failed(f"write {path}", e)


def migrate_workspace_layout(
    workspace_dir: Path, agents_dir: Path, *, skip_if_complete: bool = False
) -> MigrationReport:
    """Move `workspace/` loose files to `workspace/default/` and `workspace_<name>/` to `workspace/<name>/`.

    Also rewrites `system_allowed_paths` prefixes in every `agent.json` and makes sure each agent has its
    workspace directory. Loose entries are moved only while `workspace/` has no layout marker, so a later
    directory of a removed agent is never swept into `default`. Never raises for a step the file system refuses
    (a read-only install under the hardened unit): that step is reported as pending and the rest goes on; a
    rerun finishes it. `skip_if_complete` (start-up) skips everything but the agents' directories once a run has
    completed. A second run does nothing.
    """
    report = MigrationReport()
    agents = _agent_names(agents_dir) | _legacy_sibling_names(workspace_dir)
    marker_path = workspace_dir / LAYOUT_MARKER
    marker = _read_marker(marker_path)
    if skip_if_complete and marker is not None and marker.complete:
        _make_agent_dirs(workspace_dir, agents, report)
        return report
    legacy_root = marker is None
    if legacy_root:
        _migrate_loose_files(workspace_dir, agents, report)
    loose_moved = report.complete
    _migrate_sibling_workspaces(workspace_dir, report)
    still_loose = set(marker.loose_rewrites) if marker is not None else set()

    def loose_for(agent: str) -> bool:
        return legacy_root or agent in still_loose

    unwritten = _rewrite_agent_json(agents_dir, workspace_dir, agents, report, loose_for=loose_for)
    _make_agent_dirs(workspace_dir, agents, report)
    if legacy_root and not loose_moved:
        return report  # no marker yet: the loose files left behind are swept again next time
    new = _Marker(complete=report.complete, loose_rewrites=tuple(sorted(a for a in unwritten if loose_for(a))))
    if new != marker:
        _write_marker(marker_path, new, report)
    return report


def _make_agent_dirs(workspace_dir: Path, agents: set[str], report: MigrationReport) -> None:
    for name in sorted(agents):
        try:
            (workspace_dir / name).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            report.failed(f"create {workspace_dir / name}", e)


def migrate_at_start(workspace_dir: Path, agents_dir: Path) -> MigrationReport:
    """The start-up run: whatever may be done is done, and what may not is logged in one warning with the
    command that finishes it; the daemon starts either way."""
    report = migrate_workspace_layout(workspace_dir, agents_dir, skip_if_complete=True)
    for action in report.done:
        log.info("workspace_migrated", action=action)
    if report.pending:
        log.warning(
            "workspace_migration_incomplete",
            pending=report.pending,
            hint=f"run `{command_name()} migrate` as a user who may write these paths, then restart the daemon",
        )
    return report
