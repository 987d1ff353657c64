"""The import-rule checker: every static import of a source tree, read with `ast`, against "X never imports Y" rules.

It sees every `import` and `from … import`, at module level, inside functions and under `if TYPE_CHECKING:` (marked
`typing_only`), with relative imports resolved against the importing module's package. Loading by name
(`importlib.import_module`, as the channel registry does on purpose) is not an import and is not checked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    """Modules inside `importer` (a dotted package or module name) never import anything inside `forbidden`;
    `allowed` carves out parts of `forbidden` that may be imported after all."""

    importer: str
    forbidden: str
    allowed: tuple[str, ...] = ()

    def breaks(self, importer: str, imported: str) -> bool:
        return (
            within(importer, self.importer)
            and within(imported, self.forbidden)
            and not any(within(imported, ok) for ok in self.allowed)
        )

    def __str__(self) -> str:
        besides = f" other than {', '.join(self.allowed)}" if self.allowed else ""
        return f"{self.importer} never imports {self.forbidden}{besides}"


@dataclass(frozen=True)
class Import:
    """One imported name as written at `path:line`, resolved to an absolute dotted name."""

    path: Path
    line: int
    importer: str
    imported: str
    typing_only: bool = False


def within(name: str, package: str) -> bool:
    """Whether dotted `name` is `package` or inside it (`agenthub.session_x` is not inside `agenthub.session`)."""
    return name == package or name.startswith(package + ".")


def module_name(root: Path, path: Path) -> str:
    """The dotted name of the module at `path`, with `root` the directory that holds the top-level packages."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name of `from <level dots><module> import …` written in module `importer`."""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def is_type_checking(test: ast.expr) -> bool:
    """Whether an `if` test is `TYPE_CHECKING` or `<module>.TYPE_CHECKING`."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def typing_only_nodes(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside the body (not the `else`) of an `if TYPE_CHECKING:`."""
    marked: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and is_type_checking(node.test):
            marked.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return marked


def imports_in(root: Path, path: Path) -> Iterator[Import]:
    """Every name `path` imports; for `from m import a` both `m` and `m.a` (a may be a submodule)."""
    importer = module_name(root, path)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    typing_only = typing_only_nodes(tree)
    for node in ast.walk(tree):
        hint = id(node) in typing_only
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, importer, alias.name, hint)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                source = resolve_relative(importer, is_package, node.level, node.module)
            yield Import(path, node.lineno, importer, source, hint)
            for alias in node.names:
                if alias.name != "*":
                    yield Import(path, node.lineno, importer, f"{source}.{alias.name}", hint)


def python_files(root: Path, packages: tuple[str, ...]) -> list[Path]:
    return sorted(path for package in packages for path in (root / package).rglob("*.py"))


def violations(root: Path, packages: tuple[str, ...], rules: tuple[Rule, ...]) -> list[str]:
    """`file:line: importer imports name (rule)` for every import under `root/<packages>` that breaks a rule."""
    found: list[str] = []
    for path in python_files(root, packages):
        seen: set[tuple[int, str]] = set()
        for item in imports_in(root, path):
            for rule in rules:
                if rule.breaks(item.importer, item.imported) and (item.line, str(rule)) not in seen:
                    seen.add((item.line, str(rule)))
                    where = f"{path.relative_to(root)}:{item.line}"
                    found.append(f"{where}: {item.importer} imports {item.imported} ({rule})")
    return found
