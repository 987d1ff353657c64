"""Contract tests for every route of design §9, through a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import LogCapture
from yarl import URL

from agenthub import i18n
from agenthub.agent.large_results import LargeResultStore
from agenthub.config import Settings
from agenthub.media.names import inbox_dir
from agenthub.messages import InboundMessage
from agenthub.session_keys import session_key
from agenthub.storage.meta import SessionMeta
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text
from tests.support.harness import RunningApi, running_api
from tests.support.http import AGENT, assert_error
from tests.support.memory import chat_memory_file, is_l3_request, is_summary_request, seed
from tests.support.scheduler import until


async def test_healthz_needs_no_token_and_api_does(api: RunningApi) -> None:
    async with api.client.get(api.base_url + "/healthz") as resp:
        assert resp.status == 200 and await resp.json() == {"status": "ok"}
    async with api.client.get(api.base_url + "/readyz") as resp:
        assert resp.status == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        async with api.client.get(api.base_url + "/api/agents", headers=headers) as resp:
            assert resp.status == 401
            assert_error(await resp.json(), "unauthorized")


async def test_configured_token_is_accepted(api: RunningApi, settings_factory) -> None:
    status, body = await api.call("GET", "/api/agents")
    assert status == 200
    assert [a["name"] for a in body["agents"]] == ["default"]


async def test_chat_json_round_trip(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("第一个回答", usage={"input_tokens": 50, "output_tokens": 7}))
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "c1", "content": "你好"})
    assert status == 200
    assert body["reply"] == "第一个回答"
    assert body["session_key"] == "default:http:c1"
    assert body["usage"]["input_tokens"] == 50
    assert body["notices"] == []
    status, body = await api.call("GET", AGENT + "/sessions/c1/messages")
    assert status == 200
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    assert body["messages"][1]["content"] == "第一个回答"


async def _read_sse(resp: aiohttp.ClientResponse) -> list[tuple[str, dict[str, object]]]:
    events, event = [], ""
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            events.append((event, json.loads(line[len("data: ") :])))
    return events


async def test_sse_streams_deltas_before_done(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("one two three four five six", chunks=6, delta_delay_s=0.05))
    async with api.client.post(
        api.base_url + AGENT + "/chat?stream=1", json={"chat_id": "s1", "content": "count"}, headers=api.auth
    ) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = await _read_sse(resp)
    kinds = [k for k, _ in events]
    assert kinds.count("delta") >= 3
    assert kinds[-1] == "done"
    done = events[-1][1]
    assert "".join(str(d["text"]) for k, d in events if k == "delta") == done["full_text"]
    history = await api.gateway.history.load(session_key("default", "http", "s1"))
    assert history[-1]["content"] == done["full_text"]


async def test_json_and_sse_replies_both_stream_their_model_calls(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    """A JSON reply's model call streams too (design §7: a hung vendor is found by the read timeout between
    events); only the SSE reply shows the text as it arrives."""
    fake_llm.script(reply_text("whole at once", chunks=4), reply_text("in pieces", chunks=4))
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "j1", "content": "hi"})
    assert status == 200 and body["reply"] == "whole at once"
    async with api.client.post(
        api.base_url + AGENT + "/chat?stream=1", json={"chat_id": "j1", "content": "again"}, headers=api.auth
    ) as resp:
        events = await _read_sse(resp)
    deltas = [str(d["text"]) for k, d in events if k == "delta"]
    assert len(deltas) >= 3 and "".join(deltas) == "in pieces"
    assert [r.stream for r in fake_llm.message_requests()] == [True, True]


async def test_accept_header_selects_sse(api: RunningApi) -> None:
    async with api.client.post(
        api.base_url + AGENT + "/chat",
        json={"chat_id": "s2", "content": "hi"},
        headers={**api.auth, "Accept": "text/event-stream"},
    ) as resp:
        events = await _read_sse(resp)
    assert events[-1][0] == "done"


async def test_sse_error_event_on_llm_failure(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    from tests.support.fakes.anthropic import http_error

    fake_llm.script(http_error(401, "bad key"))
    async with api.client.post(
        api.base_url + AGENT + "/chat?stream=1", json={"chat_id": "e1", "content": "hi"}, headers=api.auth
    ) as resp:
        events = await _read_sse(resp)
    assert events[-1][0] == "error"
    assert events[-1][1]["message"]


async def test_disconnect_mid_stream_still_stores_reply(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("a slow reply that keeps going", chunks=6, delta_delay_s=0.1))
    resp = await api.client.post(
        api.base_url + AGENT + "/chat?stream=1", json={"chat_id": "d1", "content": "go"}, headers=api.auth
    )
    await resp.content.readline()  # the first frame arrived: the turn is running
    resp.close()  # the client goes away mid-stream
    key = session_key("default", "http", "d1")
    for _ in range(100):
        history = await api.gateway.history.load(key)
        if len(history) == 2:
            break
        await asyncio.sleep(0.05)
    assert history[-1]["content"] == "a slow reply that keeps going"
    status, _body = await api.call("POST", AGENT + "/chat", json={"chat_id": "d1", "content": "still there?"})
    assert status == 200


async def test_busy_session_waits_its_turn(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("first", first_byte_delay_s=0.3), reply_text("second"))
    first = asyncio.create_task(api.call("POST", AGENT + "/chat", json={"chat_id": "b1", "content": "1"}))
    await fake_llm.wait_for_requests(1)
    second = await api.call("POST", AGENT + "/chat", json={"chat_id": "b1", "content": "2"})
    assert (await first)[1]["reply"] == "first"
    assert second[1]["reply"] == "second"
    history = await api.gateway.history.load(session_key("default", "http", "b1"))
    assert [m["content"] for m in history if m["role"] == "assistant"] == ["first", "second"]


async def test_session_admin_lifecycle(api: RunningApi) -> None:
    status, meta = await api.call("POST", AGENT + "/sessions", json={"chat_id": "a1"})
    assert status == 201 and meta["chat_id"] == "a1" and meta["title"] == "新会话" and meta["pinned"] is False
    status, other = await api.call("POST", AGENT + "/sessions")
    assert status == 201 and other["chat_id"]
    status, body = await api.call("POST", AGENT + "/sessions", json={"chat_id": "a1"})
    assert status == 409
    assert_error(body, "session_exists")
    status, meta = await api.call("PATCH", AGENT + "/sessions/a1", json={"title": "Quarterly plan"})
    assert status == 200 and meta["title"] == "Quarterly plan"
    status, meta = await api.call("POST", AGENT + "/sessions/a1/pin", json={"pinned": True})
    assert status == 200 and meta["pinned"] is True
    await asyncio.sleep(0.01)
    await api.call("POST", AGENT + "/chat", json={"chat_id": "newer", "content": "hello"})
    status, body = await api.call("GET", AGENT + "/sessions")
    ids = [m["chat_id"] for m in body["sessions"]]
    assert ids[0] == "a1"  # pinned first
    assert ids.index("newer") < ids.index(other["chat_id"])  # then newest first
    status, _ = await api.call("DELETE", AGENT + "/sessions/newer")
    assert status == 204
    layout = api.gateway.history.layout("default")
    key = session_key("default", "http", "newer")
    assert not layout.history_file(key).exists() and not layout.meta_file(key).exists()
    status, body = await api.call("GET", AGENT + "/sessions/newer/messages")
    assert status == 404
    assert_error(body, "session_not_found")


@pytest.fixture
def chat_scoped(settings: Settings) -> None:
    """A second agent whose memory is per chat (written before `api` loads the agents)."""
    write_agent(settings.agents_dir, "private", {"memory": {"scope": "chat"}})


@pytest.mark.parametrize("agent", ["default", "private"])
async def test_delete_leaves_nothing_of_the_sessions_text(chat_scoped: None, api: RunningApi, agent: str) -> None:
    """The console says 无法恢复: history, meta, archive, the chat's own memory file (with its backup), its inbox and
    its text in the search index's files go."""
    gateway, key = api.gateway, session_key(agent, "http", "gone")
    await gateway.history.append(key, {"role": "user", "content": "机密内容"}, {"role": "assistant", "content": "ok"})
    await gateway.history.clear(key)  # a /restart: the text moved to the archive
    await gateway.history.append(key, {"role": "user", "content": "更多机密"})
    definition = gateway.agents.get(agent)
    shared_memory = chat_memory_file(gateway, definition)
    own_memory = chat_memory_file(gateway, definition, key)
    for path in {shared_memory, own_memory, own_memory.with_name(own_memory.name + ".bak")}:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("- 记住的事实\n")
    inbox = inbox_dir(gateway.settings.workspace_dir / agent, key)  # a file the chat sent
    inbox.mkdir(parents=True)
    (inbox / "合同.txt").write_text("机密合同")
    workspace = gateway.settings.workspace_dir / agent
    await LargeResultStore(workspace, 10, key=key).keep("srv__x", "机密的大结果" * 10)  # a tool result it got
    await LargeResultStore(workspace, 10, key=session_key(agent, "http", "kept")).keep("srv__x", "别的会话" * 10)
    status, _ = await api.call("DELETE", f"/api/agents/{agent}/sessions/gone")
    assert status == 204
    assert not inbox.exists()
    assert [p.parent.name for p in (workspace / "large_tool_results").rglob("*.txt")] == ["http_kept"]
    data = api.gateway.settings.data_dir
    left = [p for p in data.rglob("*") if p.is_file() and "机密" in p.read_text(errors="replace")]
    assert left == []
    assert not any(key.file_stem in p.name for p in data.rglob("*"))
    assert shared_memory.is_file()  # the agent-wide MEMORY.md stays (README says so)
    assert own_memory.exists() == (agent == "default")  # the same file there; a chat-scoped agent's own one goes
    status, body = await api.call("GET", f"/api/agents/{agent}/sessions")
    assert status == 200 and body["sessions"] == []


async def test_list_shows_only_http_sessions_and_legacy_gets_meta(api: RunningApi) -> None:
    history = api.gateway.history
    await history.append(session_key("default", "cli", "direct"), {"role": "user", "content": "from the cli"})
    legacy = session_key("default", "http", "old")
    path = history.layout("default").history_file(legacy)
    path.write_text(
        json.dumps({"role": "user", "content": "[channel: http] 旧的会话内容", "timestamp": 1000})
        + "\n"
        + json.dumps({"role": "assistant", "content": "ok", "timestamp": 2000})
        + "\n",
        encoding="utf-8",
    )
    status, body = await api.call("GET", AGENT + "/sessions")
    assert status == 200
    assert [m["chat_id"] for m in body["sessions"]] == ["old"]
    meta = body["sessions"][0]
    assert meta["title"] == "旧的会话内容" and meta["created_at"] == 1000 and meta["updated_at"] == 2000


async def test_auto_title_welcome_and_context(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("Sure, here is the plan."), reply_text("Trip planning to Hangzhou"))
    await api.call("POST", AGENT + "/chat", json={"chat_id": "t1", "content": "help me plan a trip to Hangzhou"})
    status, meta = await api.call("POST", AGENT + "/sessions/t1/auto-title")
    assert status == 200 and meta["title"] == "Trip planning to Hangzhou"
    fake_llm.script(reply_text("Welcome! I can help with your work."))
    status, body = await api.call("GET", AGENT + "/welcome")
    assert status == 200 and body["text"] == "Welcome! I can help with your work."
    requests_before = len(fake_llm.message_requests())
    status, again = await api.call("GET", AGENT + "/welcome")
    assert again["text"] == body["text"] and len(fake_llm.message_requests()) == requests_before
    status, ctx = await api.call("GET", AGENT + "/sessions/t1/context")
    assert status == 200
    assert ctx["messages"] == 2 and ctx["estimated_tokens"] > 0 and ctx["has_summary"] is False
    assert ctx["last_usage"]["input_tokens"] >= 0
    assert ctx["thresholds"]["consolidate_at_tokens"] > 0 and ctx["thresholds"]["keep_recent"] == 20


async def test_welcome_is_cached_in_the_agent_directory(
    api: RunningApi, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    from tests.support.agents import write_agent

    write_agent(api.gateway.settings.agents_dir, "helper", persona="You help.")
    from agenthub.agent.definition import load_agents

    api.gateway.agents = load_agents(api.gateway.settings.agents_dir)
    fake_llm.script(reply_text("Hello from helper."))
    status, _body = await api.call("GET", "/api/agents/helper/welcome")
    assert status == 200
    cached = json.loads((api.gateway.settings.agents_dir / "helper" / "welcome.json").read_text(encoding="utf-8"))
    assert cached["text"] == "Hello from helper."


async def test_unknown_agent_and_session_give_404(api: RunningApi) -> None:
    for method, path, kw in (
        ("POST", "/api/agents/nobody/chat", {"json": {"chat_id": "x", "content": "hi"}}),
        ("GET", "/api/agents/nobody/sessions", {}),
        ("GET", "/api/agents/nobody/welcome", {}),
        ("GET", AGENT + "/sessions/ghost/messages", {}),
        ("DELETE", AGENT + "/sessions/ghost", {}),
        ("PATCH", AGENT + "/sessions/ghost", {"json": {"title": "x"}}),
        ("POST", AGENT + "/sessions/ghost/pin", {"json": {"pinned": True}}),
        ("GET", AGENT + "/sessions/ghost/context", {}),
        ("POST", AGENT + "/sessions/ghost/compact", {}),
    ):
        status, body = await api.call(method, path, **kw)
        assert status == 404, (method, path)
        assert_error(body)


async def test_validation_errors_name_the_field(api: RunningApi) -> None:
    cases = [
        ({"content": "hi"}, "chat_id"),
        ({"chat_id": "c", "content": ""}, "content"),
        ({"chat_id": "c", "content": 5}, "content"),
        ({"chat_id": "c", "content": "hi", "extra": 1}, "extra"),
    ]
    for body, field in cases:
        status, answer = await api.call("POST", AGENT + "/chat", json=body)
        assert status == 422
        assert_error(answer, "validation_error")
        assert answer["error"]["message"].startswith(field)
    status, answer = await api.call(
        "POST", AGENT + "/chat", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert status == 400
    assert_error(answer, "invalid_json")
    await api.call("POST", AGENT + "/sessions", json={"chat_id": "v1"})
    status, answer = await api.call("POST", AGENT + "/sessions/v1/pin", json={"pinned": "yes please"})
    assert status == 422 and answer["error"]["message"].startswith("pinned")


async def test_pin_takes_only_a_json_boolean(api: RunningApi) -> None:
    await api.call("POST", AGENT + "/sessions", json={"chat_id": "sb"})
    for value in ("yes", "true", 1, 0, "false", None, [True]):
        status, answer = await api.call("POST", AGENT + "/sessions/sb/pin", json={"pinned": value})
        assert status == 422, value
        assert_error(answer, "validation_error")
        assert answer["error"]["message"].startswith("pinned"), value
    meta = await api.gateway.history.get_meta(session_key("default", "http", "sb"))
    assert meta is not None and meta.pinned is False  # nothing was guessed into a pin
    status, answer = await api.call("POST", AGENT + "/sessions/sb/pin", json={"pinned": True})
    assert status == 200 and answer["pinned"] is True
    status, answer = await api.call("POST", AGENT + "/sessions/sb/pin", json={"pinned": False})
    assert status == 200 and answer["pinned"] is False


async def test_oversized_body_gives_413(api: RunningApi) -> None:
    big = "x" * (api.gateway.settings.http.max_body_bytes + 10)
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "big", "content": big})
    assert status == 413
    assert_error(body, "payload_too_large")
    assert not api.gateway.history.exists(session_key("default", "http", "big"))


TRAVERSAL = ["..", "../etc", "..\\win", "a/b", "%2e%2e%2f", "%252e%252e%252f", "C:evil", "x\x00y", "..%2F..%2F"]


@pytest.mark.parametrize("evil", TRAVERSAL)
async def test_traversal_in_body_is_400(api: RunningApi, evil: str, tmp_path: Path) -> None:
    before = _files_outside_data(tmp_path)
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": evil, "content": "hi"})
    assert status == 400
    assert_error(body, "invalid_id")
    status, body = await api.call("POST", AGENT + "/sessions", json={"chat_id": evil})
    assert status == 400
    assert _files_outside_data(tmp_path) == before


@pytest.mark.parametrize("encoded", ["..%2F..%2Fetc", "%252e%252e%252fetc", "..%5Cwin", "C%3Aevil", "a%00b", "%2E%2E"])
async def test_traversal_in_url_path_is_400(api: RunningApi, encoded: str, tmp_path: Path) -> None:
    before = _files_outside_data(tmp_path)
    for method, suffix in (("GET", "/messages"), ("GET", "/context"), ("DELETE", ""), ("POST", "/pin")):
        url = f"{api.base_url}{AGENT}/sessions/{encoded}{suffix}"
        body = {"pinned": True} if suffix == "/pin" else None
        async with api.client.request(method, URL(url, encoded=True), headers=api.auth, json=body) as resp:
            assert resp.status == 400, (method, encoded, resp.status)
            assert_error(await resp.json(), "invalid_id")
    async with api.client.get(
        URL(f"{api.base_url}/api/agents/{encoded}/sessions", encoded=True), headers=api.auth
    ) as resp:
        assert resp.status == 400
    assert _files_outside_data(tmp_path) == before


async def test_traversal_in_query_is_ignored_safely(api: RunningApi, tmp_path: Path) -> None:
    before = _files_outside_data(tmp_path)
    status, _body = await api.call(
        "POST", AGENT + "/chat?stream=..%2F..%2Fx&chat_id=../../etc", json={"chat_id": "../x", "content": "hi"}
    )
    assert status == 400
    assert _files_outside_data(tmp_path) == before


async def test_a_linked_session_file_is_a_403_and_the_others_still_list(api: RunningApi, tmp_path: Path) -> None:
    history = api.gateway.history
    await history.append(session_key("default", "http", "good"), {"role": "user", "content": "fine"})
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"role": "user", "content": "not ours"}) + "\n")
    linked = session_key("default", "http", "linked")
    history.layout("default").sessions_dir.joinpath(linked.file_stem + ".jsonl").symlink_to(outside)
    status, body = await api.call("GET", AGENT + "/sessions")
    assert status == 200 and [m["chat_id"] for m in body["sessions"]] == ["good"]
    for method, suffix, payload in (
        ("GET", "/messages", None),
        ("GET", "/context", None),
        ("PATCH", "", {"title": "x"}),
        ("POST", "/pin", {"pinned": True}),
        ("DELETE", "", None),
    ):
        status, body = await api.call(method, AGENT + "/sessions/linked" + suffix, json=payload)
        assert status == 403, (method, suffix, status)
        assert_error(body, "path_refused")
        assert "Errno" not in body["error"]["message"]
    assert outside.read_text() == json.dumps({"role": "user", "content": "not ours"}) + "\n"  # never written


async def test_a_linked_sessions_directory_is_a_403_not_a_500(api: RunningApi, tmp_path: Path) -> None:
    history = api.gateway.history
    await history.append(session_key("default", "http", "good"), {"role": "user", "content": "fine"})
    sessions = history.layout("default").sessions_dir
    sessions.rename(tmp_path / "elsewhere")
    sessions.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    status, body = await api.call("GET", AGENT + "/sessions")
    assert status == 403
    assert_error(body, "path_refused")
    status, body = await api.call("POST", AGENT + "/sessions", json={"chat_id": "new"})
    assert status == 403
    assert_error(body, "path_refused")
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == [
        "default_http_good.jsonl",
        "default_http_good.meta.json",
    ]


async def test_a_confirmed_restart_with_a_linked_archive_is_a_403_in_the_chats_language(
    api: RunningApi, tmp_path: Path, log_capture: LogCapture
) -> None:
    history = api.gateway.history
    await history.append(session_key("default", "http", "arch"), {"role": "user", "content": "fine"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    history.layout("default").archive_dir.parent.joinpath("archive").symlink_to(elsewhere, target_is_directory=True)
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "arch", "content": "/restart"})
    assert status == 200  # the first asks for the confirmation
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "arch", "content": "/restart"})
    assert status == 403
    assert_error(body, "path_refused")
    assert body["error"]["message"] == i18n.text("error.path_refused", "zh-CN")
    assert list(elsewhere.iterdir()) == []  # nothing written outside
    assert not [e for e in log_capture.entries if e.get("exc_info") or e["log_level"] in ("error", "critical")]


def _files_outside_data(root: Path) -> set[Path]:
    data = root / "data"
    return {p for p in root.rglob("*") if p.is_file() and data not in p.parents}


async def test_metrics_exposition(api: RunningApi) -> None:
    await api.call("POST", AGENT + "/chat", json={"chat_id": "m1", "content": "hi"})
    async with api.client.get(api.base_url + "/metrics") as resp:
        text = await resp.text()
    assert "agenthub_turns_total 1" in text
    assert "agenthub_llm_latency_seconds_count 1" in text
    assert "agenthub_active_sessions 1" in text
    assert "agenthub_queue_depth 0" in text
    assert 'agenthub_tokens_total{kind="input"}' in text


async def test_hundred_concurrent_chats_run_in_parallel(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.first_byte_delay_s = 0.3
    loop = asyncio.get_running_loop()
    started = loop.time()
    results = await asyncio.gather(
        *(api.call("POST", AGENT + "/chat", json={"chat_id": f"p{i}", "content": f"question {i}"}) for i in range(100))
    )
    elapsed = loop.time() - started
    assert all(status == 200 for status, _ in results)
    assert elapsed < 100 * 0.3 / 5, elapsed  # far below serial (30 s); in practice about one latency
    for i in range(100):
        history = await api.gateway.history.load(session_key("default", "http", f"p{i}"))
        assert [m["role"] for m in history] == ["user", "assistant"]
        assert history[0]["content"] == f"question {i}"
        assert f"question {i}" in history[1]["content"]


@pytest.mark.parametrize("nested", [b"[" * 100_000, b'{"a":' * 50_000, b"[" * 100_000 + b"]" * 100_000])
async def test_deeply_nested_json_is_a_400_on_every_body_route(api: RunningApi, nested: bytes) -> None:
    await api.call("POST", AGENT + "/sessions", json={"chat_id": "deep"})
    for method, path in (
        ("POST", AGENT + "/chat"),
        ("POST", AGENT + "/sessions"),
        ("PATCH", AGENT + "/sessions/deep"),
        ("POST", AGENT + "/sessions/deep/pin"),
        ("POST", AGENT + "/sessions/deep/compact"),
    ):
        status, body = await api.call(method, path, data=nested, headers={"Content-Type": "application/json"})
        assert status == 400, (method, path, status)
        assert_error(body, "invalid_json")


async def test_a_reply_that_broke_after_some_text_returns_that_text_marked_incomplete(
    api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    from tests.support.fakes.anthropic import http_error, reply_tool

    # a JSON reply's model calls do not stream, so its text breaks off between two calls (a tool step between)
    fake_llm.script(reply_tool("read_memory", {}, text="the first half of the answer"), http_error(401, "bad key"))
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "half", "content": "go"})
    assert status == 502
    assert body["reply"] == "the first half of the answer"
    assert body["incomplete"] is True
    assert body["session_key"] == "default:http:half"
    assert set(body["error"]) == {"code", "message"} and body["error"]["code"] == "llm_error"
    assert body["error"]["message"]


async def test_a_reply_that_failed_before_any_text_is_the_plain_error(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    from tests.support.fakes.anthropic import http_error

    fake_llm.script(http_error(401, "bad key"))
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "none", "content": "go"})
    assert status == 502
    assert_error(body, "llm_error")


async def test_delete_during_a_background_compaction_cancels_it_and_nothing_comes_back(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    """DELETE means delete: the chat's memory flush in flight is cancelled, it never writes the file again."""
    release = asyncio.Event()

    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        if is_l3_request(body):  # the memory flush before the background compaction
            return reply_text("- the deleted chat's secret fact", hold=release)
        return reply_text("summary") if is_summary_request(body) else None

    fake_llm.responder = respond
    settings = settings_factory(memory={"flush_before_compaction": True}, llm={"timeout_s": 60.0})
    write_agent(settings.agents_dir, "default", {"memory": {"consolidate_at_tokens": 5000, "scope": "chat"}})
    async with running_api(settings) as api:
        gateway, key = api.gateway, session_key("default", "http", "gone")
        await seed(gateway, key, 20)
        fake_llm.script(reply_text("first answer", usage={"input_tokens": 6000}))
        await (await gateway.submit(InboundMessage("http", "gone", "u1", "turn one"))).result()
        await fake_llm.wait_for_requests(2)  # the flush's model call is in flight, held
        assert gateway.background(key) is not None
        own_memory = chat_memory_file(gateway, gateway.agents.get("default"), key)
        status, _ = await api.call("DELETE", AGENT + "/sessions/gone")
        assert status == 204
        assert gateway.background(key) is None
        release.set()
        await asyncio.sleep(0)
        assert not own_memory.exists() and not gateway.history.exists(key)
        status, _ = await api.call("GET", AGENT + "/sessions/gone/messages")
        assert status == 404


async def _sse_done(api: RunningApi, content: str) -> dict[str, Any]:
    url = api.base_url + AGENT + "/chat?stream=1"
    async with api.client.post(url, json={"chat_id": "j1", "content": content}, headers=api.auth) as resp:
        frames = (await resp.text()).split("\n\n")
    done = [f for f in frames if f.startswith("event: done")]
    assert len(done) == 1, frames
    parsed: dict[str, Any] = json.loads(done[0].split("data: ", 1)[1])
    return parsed


async def test_every_request_of_a_joined_turn_gets_the_joined_answer(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    """Requests that queued behind a turn are answered together; on HTTP each of them carries that answer."""
    release = asyncio.Event()
    fake_llm.script(reply_text("first answer", hold=release), reply_text("the joined answer"))
    first = asyncio.create_task(api.call("POST", AGENT + "/chat", json={"chat_id": "j1", "content": "1"}))
    await fake_llm.wait_for_requests(1)
    second = asyncio.create_task(api.call("POST", AGENT + "/chat", json={"chat_id": "j1", "content": "2"}))
    await until(lambda: api.gateway.queue_depth() >= 2)  # the running turn counts too
    streamed = asyncio.create_task(_sse_done(api, "3"))
    await until(lambda: api.gateway.queue_depth() >= 3)
    third = asyncio.create_task(api.call("POST", AGENT + "/chat", json={"chat_id": "j1", "content": "4"}))
    await until(lambda: api.gateway.queue_depth() >= 4)
    release.set()
    assert (await first)[1]["reply"] == "first answer"
    (status, joined), (last_status, last) = await second, await third
    assert (status, joined["reply"], joined["joined"]) == (200, "the joined answer", True)
    assert (last_status, last["reply"]) == (200, "the joined answer") and not last.get("joined")
    done = await streamed
    assert (done["full_text"], done["joined"]) == ("the joined answer", True)
    assert len(fake_llm.message_requests()) == 2


async def test_a_lone_surrogate_from_a_channel_is_answered_as_u_fffd(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    """A platform's JSON may carry half a surrogate pair (`"\\ud800"`: the HTTP API refuses one, a Feishu event
    does not); UTF-8, and so the model's request, cannot: the message is answered with U+FFFD in its place."""
    fake_llm.script(reply_text("got it"))
    message = InboundMessage("http", "half", "u1", "half \ud800 a pair")
    assert message.content == "half \ufffd a pair"
    await (await api.gateway.submit(message)).result()
    status, body = await api.call("GET", AGENT + "/sessions/half/messages")
    assert status == 200
    assert [m["content"] for m in body["messages"]] == ["half \ufffd a pair", "got it"]


async def test_a_lone_surrogate_kept_from_before_is_listed_as_a_json_escape(api: RunningApi) -> None:
    """A title or message stored with a lone surrogate (before messages were cleaned of them) is sent as its `\\ud800`
    escape: valid UTF-8, where the replies failed with a 500."""
    key = session_key("default", "http", "half")
    history = api.gateway.history
    await history.append(key, {"role": "user", "content": "half \ud800 a pair"}, {"role": "assistant", "content": "ok"})
    await history.store.write_meta(key, SessionMeta("half", title="half \ud800 a pair"), durable=True)
    history.evict(key)
    async with api.client.get(api.base_url + AGENT + "/sessions", headers=api.auth) as resp:
        assert resp.status == 200, await resp.text()
        listed = json.loads(await resp.read())
    assert "half \ud800 a pair" in [s["title"] for s in listed["sessions"]]
    async with api.client.get(api.base_url + AGENT + "/sessions/half/messages", headers=api.auth) as resp:
        assert resp.status == 200, await resp.text()
        raw = await resp.read()
    assert b"half \\ud800 a pair" in raw
    assert json.loads(raw)["messages"][0]["content"] == "half \ud800 a pair"


async def test_a_session_holding_a_lone_surrogate_from_before_is_still_answered(
    api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    """A message stored with a lone surrogate (before messages were cleaned of them) goes to the model with U+FFFD
    in its place: its UTF-8 encoding failed every later turn of the session."""
    key = session_key("default", "http", "half")
    history = api.gateway.history
    await history.append(key, {"role": "user", "content": "half \ud800 a pair"}, {"role": "assistant", "content": "ok"})
    history.evict(key)
    fake_llm.script(reply_text("still here"))
    reply = await (await api.gateway.submit(InboundMessage("http", "half", "u1", "next"))).result()
    assert getattr(reply, "full_text", None) == "still here", reply
    assert "half \ufffd a pair" in json.dumps(fake_llm.message_requests()[-1].body, ensure_ascii=False)
