"""The SeenIds contract on every backend's `Stores`: an id is new once per memory, a forgotten one is new again, and
what one instance saw another instance over the same store sees too."""

from __future__ import annotations

from pathlib import Path

from agenthub.storage.stores import Stores
from tests.support.backends import OpenMore


async def test_an_id_is_new_once_and_new_again_when_taken_back(backend_stores: Stores, tmp_path: Path) -> None:
    seen = backend_stores.seen_ids_for("wecom", tmp_path / "state")("app-1", 600.0)
    assert seen.ttl_s == 600.0
    assert await seen.check_and_add("m1") is False
    assert await seen.check_and_add("m1") is True
    await seen.forget("m1")
    assert await seen.check_and_add("m1") is False
    other = backend_stores.seen_ids_for("wecom", tmp_path / "state")("app-2", 600.0)
    assert await other.check_and_add("m1") is False  # another memory is another scope


async def test_a_seen_id_survives_reopening(backend_stores: Stores, more_stores: OpenMore, tmp_path: Path) -> None:
    seen = backend_stores.seen_ids_for("feishu", tmp_path / "state")("bot", 600.0)
    assert await seen.check_and_add("om_1") is False
    later = (await more_stores()).seen_ids_for("feishu", tmp_path / "state")("bot", 600.0)
    assert await later.check_and_add("om_1") is True
