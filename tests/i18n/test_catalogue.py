"""The text catalogue: every text in zh-CN and en with the same placeholders, and every key the code uses exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from agenthub import i18n
from agenthub.config import Settings
from tests.support.paths import REPO

ROOT = REPO
KEY_SHAPE = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+")


def test_every_text_exists_in_both_locales_with_the_same_placeholders() -> None:
    assert i18n.TEXTS, "the catalogue is empty"
    for key, entry in i18n.TEXTS.items():
        assert set(entry) == set(i18n.LOCALES), f"{key}: locales {sorted(entry)}"
        for locale in i18n.LOCALES:
            assert entry[locale].strip(), f"{key}: empty {locale} text"
        assert i18n.placeholders(entry["zh-CN"]) == i18n.placeholders(entry["en"]), f"{key}: placeholders differ"


def _text_keys_used_in(path: Path) -> list[tuple[int, str]]:
    """(line, key) of every catalogue key a source file names: `….text("key", …)` (i18n.text, a command
    context's or a channel config's), `Text("key", …)`, and a command's help key in `….register("name", "key", …)`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func, args = node.func, node.args
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        named = args[0] if name in ("text", "Text") else args[1] if name == "register" and len(args) == 3 else None
        if not (isinstance(named, ast.Constant) and isinstance(named.value, str)):
            continue
        via_i18n = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "i18n"
        if via_i18n or name != "text" or KEY_SHAPE.fullmatch(named.value):  # a printer's .text("\n") is no key
            found.append((node.lineno, named.value))
    return found


def test_the_key_check_sees_every_way_the_code_names_a_key(tmp_path: Path) -> None:
    source = (
        'i18n.text("a.b", locale)\nctx.text("c.d", n=1)\nText("e.f")\ni18n.Text("g.h", {})\n'
        'gateway.commands.register("ping", "i.j", _ping)\n'
    )
    path = tmp_path / "shapes.py"
    path.write_text(source, encoding="utf-8")
    assert [key for _, key in _text_keys_used_in(path)] == ["a.b", "c.d", "e.f", "g.h", "i.j"]


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


# ---- user-facing literals outside the catalogue (checked mechanically, by the shape of the code) ----

EVENTS_TO_USERS = frozenset({"ErrorEvent", "NoticeEvent", "DoneEvent"})
"""Reply events: their text goes to a chat user as it is."""
CHANNEL_SENDS = frozenset({"say", "_reply_safely", "send_safely", "with_error"})
"""The channels' ways of writing one text to a chat user."""


def _has_words(node: ast.expr) -> bool:
    """A string literal (or f-string) with letters in it: words someone wrote for a reader."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(ch.isalpha() for ch in node.value)
    if isinstance(node, ast.JoinedStr):
        return any(_has_words(part) for part in node.values if isinstance(part, ast.Constant))
    if isinstance(node, ast.BinOp):
        return _has_words(node.left) or _has_words(node.right)
    return False


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _user_texts(call: ast.Call) -> list[ast.expr]:
    """The arguments of `call` that reach a chat user as they are."""
    name = _called_name(call)
    if name in EVENTS_TO_USERS:
        return [*call.args[:1], *(k.value for k in call.keywords if k.arg in ("message", "text", "full_text"))]
    if name in CHANNEL_SENDS:
        return list(call.args)
    return []


def _handlers_registered(tree: ast.Module) -> set[str]:
    """Names of the functions a module registers as command handlers (`….register("name", "help", handler)`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node) == "register" and len(node.args) == 3:
            handler = node.args[2]
            if isinstance(handler, ast.Name):
                found.add(handler.id)
    return found


def _literals_for_users(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) of every literal in a module that is written to a chat user as it is."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found += [(node.lineno, f"{_called_name(node)}(…)") for arg in _user_texts(node) if _has_words(arg)]
    handlers = _handlers_registered(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name in handlers:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Return) and inner.value is not None and _has_words(inner.value):
                    found.append((inner.lineno, f"the command handler {node.name} returns a literal"))
    return sorted(found)


def test_no_text_for_users_is_written_as_a_literal_outside_the_catalogue() -> None:
    found = []
    for package in ("agenthub", "channels"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "catalogue" not in path.parts:
                tree = ast.parse(path.read_text(encoding="utf-8"))
                found += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in _literals_for_users(tree)]
    assert not found, "user-facing literals (put them in agenthub/i18n/catalogue):\n" + "\n".join(found)


def test_the_literal_check_catches_each_shape_it_knows() -> None:
    """The checker itself: each shape of a user-facing literal is caught, and catalogue lookups are not."""
    source = """
ErrorEvent("Stopped.", code="stopped")
NoticeEvent(f"Queued behind {n} messages")
DoneEvent(full_text="Done.")
await reply.say("抱歉")
ErrorEvent(i18n.text("abort.other", locale), code="stopped")
NoticeEvent(notice)
async def _ping(ctx):
    return "pong"
async def _pong(ctx):
    return ctx.text("command.help.title")
gateway.commands.register("ping", "command.help.help", _ping)
gateway.commands.register("pong", "command.help.help", _pong)
"""
    assert [line for line, _ in _literals_for_users(ast.parse(source))] == [2, 3, 4, 5, 9]
