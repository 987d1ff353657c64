"""The Tokens contract on every backend's `Stores`: a created token identifies its name until revoked, names are
unique, and another instance over the same store sees the same tokens."""

from __future__ import annotations

import pytest

from agenthub.storage.stores import Stores
from tests.support.backends import OpenMore


async def test_a_created_token_identifies_its_name_until_revoked(backend_stores: Stores) -> None:
    tokens = backend_stores.tokens
    assert not await tokens.has_tokens()
    token = await tokens.create("ci")
    assert await tokens.identify(token) == "ci"
    assert await tokens.identify(token + "x") is None
    assert [t.name for t in await tokens.stored()] == ["ci"]
    assert token not in repr(await tokens.stored())  # only hashes are stored
    assert await tokens.revoke("ci")
    assert await tokens.identify(token) is None
    assert not await tokens.revoke("ci")


async def test_a_name_is_taken_once_and_seen_by_another_instance(backend_stores: Stores, more_stores: OpenMore) -> None:
    token = await backend_stores.tokens.create("console")
    with pytest.raises(ValueError):
        await backend_stores.tokens.create("console")
    other = (await more_stores()).tokens
    assert await other.has_tokens() and await other.identify(token) == "console"
