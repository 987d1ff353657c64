"""TokenStore: hashes only on disk, names for who called, revocation seen by a running reader at once."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from agenthub.storage.tokens import CONFIG_TOKEN_NAME, TokenStore


def test_only_hashes_reach_the_disk_and_the_file_is_private(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    token = store.create("console")
    text = (tmp_path / "tokens.json").read_text()
    assert token.startswith("ahk_") and token not in text
    assert stat.S_IMODE((tmp_path / "tokens.json").stat().st_mode) == 0o600
    assert [t.name for t in store.stored()] == ["console"]


def test_identify_names_the_caller_and_refuses_strangers(tmp_path: Path) -> None:
    store = TokenStore(tmp_path, extra_tokens=["from-config", "", "also-from-config"])
    ci, ops = store.create("ci"), store.create("ops")
    assert store.identify(ci) == "ci" and store.identify(ops) == "ops"
    assert store.identify("from-config") == f"{CONFIG_TOKEN_NAME}-1"  # each its own caller, never shared
    assert store.identify("also-from-config") == f"{CONFIG_TOKEN_NAME}-2"
    assert store.identify("ahk_guess") is None and not store.verify("")


def test_a_revoked_token_is_refused_by_a_store_that_already_read_the_file(tmp_path: Path) -> None:
    daemon_side = TokenStore(tmp_path)
    cli_side = TokenStore(tmp_path)
    keep, drop = cli_side.create("keep"), cli_side.create("drop")
    assert daemon_side.verify(drop)  # read and cached
    assert cli_side.revoke("drop") is True  # immediately after, within the same mtime tick
    assert not daemon_side.verify(drop) and daemon_side.verify(keep)
    assert cli_side.revoke("drop") is False
    assert json.loads((tmp_path / "tokens.json").read_text())["tokens"][0]["name"] == "keep"


def test_names_are_unique_and_required(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    store.create("a")
    with pytest.raises(ValueError, match="already exists"):
        store.create("a")
    for bad in ("  ", "", "a/b", "..", "a%2Fb", "x" * 65, "tab\there", "config", "config-1", "Config-12"):
        with pytest.raises(ValueError, match="token name"):
            store.create(bad)
    assert store.identify(store.create("张三")) == "张三"
