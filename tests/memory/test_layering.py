"""The memory layer's place: it never imports the gateway, and the agent package (request assembly, tools) never
imports memory, not even for type hints."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agenthub"


def imported_modules(path: Path) -> set[str]:
    """Every module an `import` / `from … import` in the file names (relative imports resolved to `agenthub.*`)."""
    found: set[str] = set()
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize(("package", "forbidden"), [("memory", "agenthub.gateway"), ("agent", "agenthub.memory")])
def test_a_package_never_imports_the_layer_above_it(package: str, forbidden: str) -> None:
    offenders = {
        str(path.relative_to(PACKAGE.parent)): sorted(
            m for m in imported_modules(path) if m.split(".")[:2] == forbidden.split(".")
        )
        for path in sorted((PACKAGE / package).rglob("*.py"))
    }
    assert {file: modules for file, modules in offenders.items() if modules} == {}
