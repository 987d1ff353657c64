"""The text catalogue: every text in zh-CN and en with the same placeholders, and every key the code uses exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agenthub import i18n
from agenthub.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def test_every_text_exists_in_both_locales_with_the_same_placeholders() -> None:
    assert i18n.TEXTS, "the catalogue is empty"
    for key, entry in i18n.TEXTS.items():
        assert set(entry) == set(i18n.LOCALES), f"{key}: locales {sorted(entry)}"
        for locale in i18n.LOCALES:
            assert entry[locale].strip(), f"{key}: empty {locale} text"
        assert i18n.placeholders(entry["zh-CN"]) == i18n.placeholders(entry["en"]), f"{key}: placeholders differ"


def _text_keys_used_in(path: Path) -> list[tuple[int, str]]:
    """(line, key) of every `i18n.text("literal", …)` call in one source file (the code calls it by that name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func, first = node.func, node.args[0]
        if not (isinstance(func, ast.Attribute) and func.attr == "text" and isinstance(func.value, ast.Name)):
            continue
        if func.value.id == "i18n" and isinstance(first, ast.Constant) and isinstance(first.value, str):
            found.append((node.lineno, first.value))
    return found


def test_every_key_the_code_asks_for_is_in_the_catalogue() -> None:
    missing = []
    for package in ("agenthub", "channels"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, key in _text_keys_used_in(path):
                if key not in i18n.TEXTS:
                    missing.append(f"{path.relative_to(ROOT)}:{line}: {key}")
    assert not missing, "texts without a translation:\n" + "\n".join(missing)


def test_an_unknown_key_is_an_error_not_a_silent_english_fallback() -> None:
    with pytest.raises(i18n.UnknownTextError):
        i18n.text("no.such.text", "zh-CN")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("zh-CN", "zh-CN"),
        ("zh_CN.UTF-8", "zh-CN"),
        ("ZH", "zh-CN"),
        ("zh-Hans", "zh-CN"),
        ("en", "en"),
        ("en_US.UTF-8", "en"),
        ("C", "en"),
        ("fr_FR", None),
        ("", None),
        (None, None),
    ],
)
def test_locale_names_are_normalised(raw: object, expected: str | None) -> None:
    assert i18n.normalise_locale(raw) == expected


def test_team_channels_default_to_chinese_and_a_channel_setting_wins(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, channels={"feishu": {"locale": "en"}})
    assert i18n.channel_locale(settings, "wecom") == "zh-CN"
    assert i18n.channel_locale(settings, "feishu") == "en"


def test_the_cli_follows_the_system_locale(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert i18n.channel_locale(settings, "cli") == "zh-CN"
    monkeypatch.setenv("LANG", "en_GB.UTF-8")
    assert i18n.channel_locale(settings, "cli") == "en"


def test_placeholders_are_filled() -> None:
    zh = i18n.text("error.internal", "zh-CN", ref="abc")
    en = i18n.text("error.internal", "en", ref="abc")
    assert "abc" in zh and "abc" in en and zh != en
