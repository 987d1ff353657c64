"""docs/architecture.md's import table against the code: one row per package and loose module of `agenthub`, with
the units it imports at run time and those it names for type hints only, read from the source with `ast`; and no
two units importing each other at run time."""

from __future__ import annotations

from pathlib import Path

from tests.support.architecture import Imports, cycle_edges, cycles, differences, package_graph, table_rows, units
from tests.support.paths import REPO, plant

DOC = REPO / "docs" / "architecture.md"
MAX_LOOSE_MODULES = 10
"""Issue 22: the top level shows the architecture: a small kernel of loose modules, everything else in packages."""


def test_the_import_table_matches_the_code() -> None:
    found = differences(table_rows(DOC.read_text(encoding="utf-8")), package_graph(REPO), units(REPO))
    assert not found, "docs/architecture.md's import table is stale:\n" + "\n".join(found)


def test_the_top_level_holds_at_most_ten_loose_modules() -> None:
    loose = sorted(spelled for spelled in units(REPO).values() if spelled.endswith(".py"))
    assert "messages.py" in loose and "hosting/" in units(REPO).values()
    assert len(loose) <= MAX_LOOSE_MODULES, f"{len(loose)} loose modules at agenthub/'s top level: {', '.join(loose)}"


def test_no_units_import_each_other_at_run_time() -> None:
    graph = package_graph(REPO)
    found = cycles(graph)
    held = cycle_edges(graph)
    assert not found, f"runtime import cycles {found}, held by:\n" + "\n".join(held)


PLANTED = {
    "agenthub/__init__.py": "",
    "agenthub/clock.py": "import time\nfrom agenthub import __version__\n",
    "agenthub/app.py": "def build():\n    from .store import files\n",
    "agenthub/store/__init__.py": "from agenthub.clock import now\nfrom .files import FileStore\n",
    "agenthub/store/files.py": (
        "import typing\n"
        "if typing.TYPE_CHECKING:\n"
        "    from agenthub.app import build\n"
        "    from agenthub import clock\n"
        "else:\n"
        "    from agenthub.gate import Gate\n"
    ),
    "agenthub/gate/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..clock import now\n",
    "agenthub/gate/rules.py": "from agenthub.store import files\n",
}


def test_the_graph_counts_lazy_imports_and_keeps_type_hints_apart(tmp_path: Path) -> None:
    plant(tmp_path, PLANTED)
    graph = package_graph(tmp_path)
    assert units(tmp_path) == {"app": "app.py", "clock": "clock.py", "gate": "gate/", "store": "store/"}
    assert {name: (sorted(i.runtime), sorted(i.hints)) for name, i in graph.items()} == {
        "app": (["store"], []),
        "clock": ([], []),
        "gate": (["store"], ["clock"]),
        "store": (["clock", "gate"], ["app"]),
    }
    assert cycles(graph) == [["gate", "store"]]
    assert cycle_edges(graph) == ["gate -> store", "store -> gate"]


TABLE = """# Page

| package / module | what lives there | imports at run time | for type hints only |
|---|---|---|---|
| `app.py` | the root | `store` | nothing |
| `clock.py` | time | `gate` | nothing |
| `store/` | files | `clock`, `gate.rules` | `app` |
| `gone/` | an old package | nothing | nothing |

Prose after the table, with `names` in it.
"""


def test_every_wrong_row_is_named() -> None:
    real = {
        "app": Imports({"store"}),
        "clock": Imports(),
        "store": Imports({"clock", "gate"}, {"app"}),
        "gate": Imports({"store"}, {"clock"}),
    }
    known = {"app": "app.py", "clock": "clock.py", "store": "store/", "gate": "gate/"}
    assert differences(table_rows(TABLE), real, known) == [
        "missing row: `gate/`",
        "row for a unit that does not exist: `gone`",
        "`clock.py`: runtime import the code does not make: `gate`",
    ]


def test_a_row_naming_two_units_is_refused() -> None:
    bad = TABLE.replace("| `app.py` |", "| `app.py`, `web.py` |")
    try:
        table_rows(bad)
    except ValueError as error:
        assert "exactly one unit" in str(error)
    else:
        raise AssertionError("a row of two units was accepted")
