"""Each bearer token is its own HTTP sender: stored messages carry its name, compaction audits name it."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from agenthub.config import Settings
from agenthub.session_keys import session_key
from agenthub.storage.tokens import TokenStore, hash_token
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.harness import RunningApi
from tests.support.http import AGENT
from tests.support.memory import seed, summaries_then_default

CONFIG_TOKEN = "configured-secret-token-0123456789"


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    settings = settings_factory(http={"tokens": [CONFIG_TOKEN]})
    write_agent(settings.agents_dir, "profiled", {"memory": {"user_profile": "per_user"}})
    return settings


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_each_token_is_the_sender_of_its_messages(api: RunningApi) -> None:
    alice = TokenStore(api.gateway.settings.auth_dir).create("alice")  # made while the daemon runs
    for chat_id, token in (("t-test", api.token), ("t-alice", alice), ("t-config", CONFIG_TOKEN)):
        status, _body = await api.call(
            "POST", AGENT + "/chat", json={"chat_id": chat_id, "content": "hi"}, headers=bearer(token)
        )
        assert status == 200, chat_id
    senders: dict[str, str] = {}
    for chat_id in ("t-test", "t-alice", "t-config"):
        history = await api.gateway.history.load(session_key("default", "http", chat_id))
        senders[chat_id] = history[0]["sender_id"]
        assert history[0]["chat_type"] == "private"  # the console is one person's chat
    assert senders == {"t-test": "test", "t-alice": "alice", "t-config": "config-1"}


async def test_compaction_audit_names_the_token(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    alice = TokenStore(api.gateway.settings.auth_dir).create("alice")
    await seed(api.gateway, session_key("default", "http", "long"), 30)
    fake_llm.responder = summaries_then_default()
    with capture_logs() as logs:
        status, body = await api.call("POST", AGENT + "/sessions/long/compact", headers=bearer(alice))
    assert status == 200 and body["messages_after"] < body["messages_before"]
    audits = [e for e in logs if e["event"] == "compaction_audit"]
    assert [e["actor"] for e in audits] == ["http:alice"]


async def test_a_revoked_token_is_refused_at_once(api: RunningApi) -> None:
    store = TokenStore(api.gateway.settings.auth_dir)
    bob = store.create("bob")
    assert (await api.call("GET", "/api/agents", headers=bearer(bob)))[0] == 200
    store.revoke("bob")
    status, body = await api.call("GET", "/api/agents", headers=bearer(bob))
    assert status == 401 and body["error"]["code"] == "unauthorized"


def add_token_by_hand(settings: Settings, name: str) -> str:
    """Append an entry to auth/tokens.json the way an operator editing it would, bypassing `create()`'s checks."""
    path = settings.auth_dir / "tokens.json"
    data = json.loads(path.read_text()) if path.exists() else {"tokens": []}
    token = f"ahk_by_hand_{len(data['tokens'])}"
    data["tokens"].append({"name": name, "sha256": hash_token(token), "created_at": 0})
    path.write_text(json.dumps(data))
    return token


async def test_a_token_name_unfit_for_a_file_name_still_chats_with_a_per_user_profile(
    api: RunningApi, settings: Settings
) -> None:
    senders: dict[str, str] = {}
    for name in ("ci/prod", "..", "张三"):  # `token create` refuses the first two; a hand-edited file may not
        token = add_token_by_hand(settings, name)
        chat_id = f"u{len(senders)}"
        status, body = await api.call(
            "POST", "/api/agents/profiled/chat", json={"chat_id": chat_id, "content": "hi"}, headers=bearer(token)
        )
        assert status == 200, (name, body)
        history = await api.gateway.history.load(session_key("profiled", "http", chat_id))
        senders[name] = history[0]["sender_id"]
    assert senders["张三"] == "张三"
    assert senders["ci/prod"].startswith("token-") and senders[".."].startswith("token-")
    assert senders["ci/prod"] != senders[".."]
