"""The package graph of `agenthub` (each sub-package and each loose module a unit) against docs/architecture.md's table.

A unit's runtime imports are every import outside `if TYPE_CHECKING:` (also those inside functions: they run when
called); its type-hint imports are the units it names only under `TYPE_CHECKING`. The table's rows are
`| \\`unit/\\` or \\`unit.py\\` | what lives there | runtime imports | type-hint-only imports |`, an import cell holding
backticked unit names (a dotted name counts as its unit) or `nothing`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.import_rules import imports_in, python_files

PACKAGE = "agenthub"
TABLE_HEADER = re.compile(r"^\|\s*package / module\s*\|", re.IGNORECASE)
NAME = re.compile(r"`([^`]+)`")


@dataclass
class Imports:
    """What one unit imports of the others: at run time, and under `TYPE_CHECKING` only."""

    runtime: set[str] = field(default_factory=set)
    hints: set[str] = field(default_factory=set)


def units(root: Path) -> dict[str, str]:
    """Unit name → how the table spells it: `gateway/` for a package, `clock.py` for a loose module."""
    found: dict[str, str] = {}
    for path in sorted((root / PACKAGE).iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            found[path.name] = f"{path.name}/"
        elif path.suffix == ".py" and path.name != "__init__.py":
            found[path.stem] = path.name
    return found


def unit_of(dotted: str, known: dict[str, str]) -> str | None:
    """The unit a dotted name lies in, or None outside `agenthub`'s units."""
    parts = dotted.split(".")
    if len(parts) < 2 or parts[0] != PACKAGE or parts[1] not in known:
        return None
    return parts[1]


def package_graph(root: Path) -> dict[str, Imports]:
    """Every unit's imports of the other units, read from the source with `ast`."""
    known = units(root)
    graph = {name: Imports() for name in known}
    for path in python_files(root, (PACKAGE,)):
        for item in imports_in(root, path):
            source, target = unit_of(item.importer, known), unit_of(item.imported, known)
            if source is None or target is None or source == target:
                continue
            (graph[source].hints if item.typing_only else graph[source].runtime).add(target)
    for imports in graph.values():
        imports.hints -= imports.runtime
    return graph


def cycles(graph: dict[str, Imports]) -> list[list[str]]:
    """The groups of units that import each other at run time (strongly connected, more than one unit), sorted."""
    edges = {name: sorted(imports.runtime) for name, imports in graph.items()}
    groups: list[list[str]] = []
    for name in sorted(edges):
        if any(name in group for group in groups):
            continue
        group = sorted(reach(edges, name) & reached_by(edges, name))
        if len(group) > 1:
            groups.append(group)
    return groups


def reach(edges: dict[str, list[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for target in edges[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def reached_by(edges: dict[str, list[str]], start: str) -> set[str]:
    reverse: dict[str, list[str]] = {name: [] for name in edges}
    for source, targets in edges.items():
        for target in targets:
            reverse[target].append(source)
    return reach(reverse, start)


def cycle_edges(graph: dict[str, Imports]) -> list[str]:
    """`a -> b` for every runtime import that holds a cycle together."""
    found: list[str] = []
    for group in cycles(graph):
        found += [f"{a} -> {b}" for a in group for b in sorted(graph[a].runtime) if b in group]
    return found


def table_rows(markdown: str) -> dict[str, Imports]:
    """The import table of the page: the unit name of each row → the imports it claims."""
    lines = markdown.splitlines()
    start = next(index for index, line in enumerate(lines) if TABLE_HEADER.match(line))
    rows: dict[str, Imports] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4:
            raise ValueError(f"an import table row needs 4 cells: {line}")
        spelled = NAME.findall(cells[0])
        if len(spelled) != 1:
            raise ValueError(f"an import table row names exactly one unit: {line}")
        rows[spelled[0].removesuffix("/").removesuffix(".py")] = Imports(names(cells[2]), names(cells[3]))
    return rows


def names(cell: str) -> set[str]:
    return {name.split(".")[0] for name in NAME.findall(cell)}


def differences(documented: dict[str, Imports], real: dict[str, Imports], known: dict[str, str]) -> list[str]:
    """One line per row the page lacks or has too many of, and per import it claims wrongly or leaves out."""
    found = [f"missing row: `{known[name]}`" for name in sorted(real.keys() - documented.keys())]
    found += [f"row for a unit that does not exist: `{name}`" for name in sorted(documented.keys() - real.keys())]
    for name in sorted(documented.keys() & real.keys()):
        for kind in ("runtime", "hints"):
            claimed, actual = getattr(documented[name], kind), getattr(real[name], kind)
            label = f"`{known[name]}`: " + ("runtime import" if kind == "runtime" else "type-hint-only import")
            found += [f"{label} not in the table: `{other}`" for other in sorted(actual - claimed)]
            found += [f"{label} the code does not make: `{other}`" for other in sorted(claimed - actual)]
    return found
