"""The API depends on the narrow `ApiHost` protocol, never on the gateway itself; connect mode stays light."""

from __future__ import annotations

import ast
from pathlib import Path

import agenthub

ROOT = Path(agenthub.__file__).parent


def _imported(path: Path) -> set[str]:
    """Every module `path` imports, at run time or for type checking alike."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


def test_the_api_never_imports_the_gateway_core_or_a_channel() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in sorted((ROOT / "api").glob("*.py"))
        for name in _imported(path)
        if name.startswith(("agenthub.gateway.core", "channels"))
    }
    assert offenders == set()


def test_remote_reads_only_the_apis_light_codec_and_code_tables() -> None:
    from_api = {name for name in _imported(ROOT / "hosting" / "remote.py") if name.startswith("agenthub.api")}
    assert from_api == {"agenthub.api.sse", "agenthub.api.codes"}
    for light in ("sse.py", "codes.py"):
        light_ones = ("agenthub.messages", "agenthub.jsonsafe")  # each imports only the standard library
        assert all(not n.startswith("agenthub.") or n in light_ones for n in _imported(ROOT / "api" / light))
    assert all(not n.startswith("agenthub.") for n in _imported(ROOT / "jsonsafe.py"))
