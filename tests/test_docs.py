"""The README is a tour (≤ 400 lines) and every relative link in it and in docs/*.md resolves, #anchors included;
the presets' table in docs/configuration.md says what agenthub/llm/presets.py does."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from agenthub.llm.presets import PRESET_MODELS, PRESETS
from tests.support.paths import REPO

README_MAX_LINES = 400
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def prose_lines(path: Path) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters of any script kept), spaces → -."""
    text = re.sub(r"`|\*", "", heading.strip().lower())
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in prose_lines(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return [m.group(1) for line in prose_lines(path) for m in LINK.finditer(line)]


def test_the_readme_is_a_tour_not_a_reference() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the reference belongs in docs/"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, file:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert not broken, f"{path.name}:\n" + "\n".join(broken)


def test_the_slug_rule_matches_github_s() -> None:
    assert slug("Feishu / Lark") == "feishu--lark"
    assert slug("Scheduled jobs (定时任务)") == "scheduled-jobs-定时任务"
    assert slug("Searching memory: `memory_search`") == "searching-memory-memory_search"


def test_the_presets_table_says_what_the_code_does() -> None:
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([\w-]+)` \|.*$", text, re.MULTILINE)}
    for name, url in PRESETS.items():
        assert name in rows, f"preset {name} is not in the table"
        assert url in rows[name] and f"`{PRESET_MODELS[name]}`" in rows[name], rows[name]


def test_the_docs_name_the_config_file_as_it_is() -> None:
    for path in markdown_files():
        assert "config.toml" not in path.read_text(encoding="utf-8").replace("agenthub.toml", ""), path.name
