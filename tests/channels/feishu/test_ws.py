"""Long-connection mode: the real lark-oapi ws.Client against a local endpoint speaking its frame protocol."""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.support.fakes.feishu import FakeFeishu, bot_open_id, mention, message_event, other_event, running_channel
from tests.support.fakes.submitter import ScriptedSubmitter

APP_ID, SECRET = "cli_ws1", "s3cret-ws1"


def ws_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "lark-ws"]


async def test_ws_client_receives_an_event_replies_and_stops_cleanly(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter(chunks=3, delay_s=0.02)
    apps = {"main": {"app_id": APP_ID, "app_secret": SECRET, "agent": "helper"}}
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        with capture_logs() as logs:
            async with running_channel(fake, tmp_path, apps, gateway) as h:
                await asyncio.wait_for(fake.ws_connected.wait(), 10)
                assert len(ws_threads()) == 1
                event = message_event(
                    "@_user_1 over the wire",
                    app_id=APP_ID,
                    chat_type="group",
                    chat_id="oc_ws",
                    mentions=[mention("@_user_1", bot_open_id(APP_ID), "Bot")],
                )
                ack = await fake.push_event(APP_ID, event)
                unknown = await fake.push_event(APP_ID, other_event("contact.user.created_v3"))
                await fake.wait_until(lambda: fake.closed_cards() == 1)
                redelivered = await fake.push_event(APP_ID, event)  # at-least-once: the same message again
                await asyncio.sleep(0.05)
                assert h.channel.apps["main"].status == "ready"
            await asyncio.wait_for(fake.ws_closed.wait(), 5)
        assert ws_threads() == [] and fake.ws == {}
    assert [e for e in logs if e["log_level"] in ("error", "critical")] == []  # a clean stop logs no error
    assert ack["ack"]["code"] == 200 and "biz_rt" in ack["headers"]
    assert unknown["ack"]["code"] == 200 and redelivered["ack"]["code"] == 200
    [msg] = gateway.received
    assert (msg.content, msg.chat_id, msg.agent, msg.cred_id) == ("over the wire", "oc_ws", "helper", "main")
    card = fake.card_for_reply(event["event"]["message"]["message_id"])
    assert card.content == "echo: over the wire" and card.streaming is False


async def test_two_long_connection_apps_share_one_thread(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    secrets = {"cli_ws_a": "sa", "cli_ws_b": "sb"}
    apps = {"a": {"app_id": "cli_ws_a", "app_secret": "sa"}, "b": {"app_id": "cli_ws_b", "app_secret": "sb"}}
    async with FakeFeishu(secrets) as fake:
        async with running_channel(fake, tmp_path, apps, gateway):
            await fake.wait_until(lambda: len(fake.ws) == 2, timeout=10)
            assert len(ws_threads()) == 1
            for app_id in secrets:
                await fake.push_event(app_id, message_event(f"to {app_id}", app_id=app_id, sender=f"ou_{app_id}"))
            await fake.wait_until(lambda: fake.closed_cards() == 2)
        assert ws_threads() == []
    assert sorted((m.cred_id, m.content) for m in gateway.received) == [("a", "to cli_ws_a"), ("b", "to cli_ws_b")]


# lark-oapi itself calls the deprecated `logger.warn` when a ping meets the connection this test drops
@pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning")
async def test_a_hanging_endpoint_request_neither_stalls_other_apps_nor_blocks_forever(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    secrets = {"cli_ws_a": "sa", "cli_ws_b": "sb"}
    apps: dict[str, dict[str, Any]] = {
        "a": {"app_id": "cli_ws_a", "app_secret": "sa", "request_timeout_s": 0.3},
        "b": {"app_id": "cli_ws_b", "app_secret": "sb"},
    }
    async with FakeFeishu(secrets) as fake:
        async with running_channel(fake, tmp_path, apps, gateway) as h:
            await fake.wait_until(lambda: len(fake.ws) == 2, timeout=10)
            fake.hang_endpoint.add("cli_ws_a")
            await fake.ws["cli_ws_a"].close()  # a reconnects; its endpoint request is never answered
            await fake.wait_until(lambda: "cli_ws_a" in fake.endpoint_hanging)
            pings_before = fake.pings.get("cli_ws_b", 0)
            for i in range(3):  # meanwhile b, on the same lark-ws thread, is acked at once
                event = message_event(f"b while a hangs {i}", app_id="cli_ws_b", sender=f"ou_b{i}")
                ack = await fake.push_event("cli_ws_b", event, timeout=3)
                assert ack["ack"]["code"] == 200
            await fake.wait_until(lambda: fake.pings.get("cli_ws_b", 0) > pings_before, timeout=3)
            # a's request was abandoned after its timeout and retried (the fake asks for a 1 s interval)
            await fake.wait_until(lambda: fake.endpoint_requests.count("cli_ws_a") >= 3, timeout=3)
            pings_a = fake.pings.get("cli_ws_a", 0)
            fake.release_endpoint("cli_ws_a")
            # connected and pinging: the released requests may each connect, the client keeping one of them
            await fake.wait_until(lambda: "cli_ws_a" in fake.ws and fake.pings.get("cli_ws_a", 0) > pings_a, timeout=5)
            ack = await fake.push_event("cli_ws_a", message_event("a is back", app_id="cli_ws_a", sender="ou_a"))
            assert ack["ack"]["code"] == 200
            await fake.wait_until(lambda: fake.closed_cards() == 4)
            assert h.channel.apps["a"].status == "ready"
        assert ws_threads() == []
    assert sorted(m.content for m in gateway.received) == ["a is back"] + [f"b while a hangs {i}" for i in range(3)]


async def test_a_long_connection_app_down_at_start_connects_once_feishu_is_back(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    apps = {"main": {"app_id": APP_ID, "app_secret": SECRET}}
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        fake.unavailable = 1
        async with running_channel(fake, tmp_path, apps, gateway, start_retry_s=0.05) as h:
            assert h.channel.apps["main"].status == "failed" and ws_threads() == []
            await asyncio.wait_for(fake.ws_connected.wait(), 10)  # the retry starts the lark-ws thread
            assert h.channel.apps["main"].status == "ready" and len(ws_threads()) == 1
            ack = await fake.push_event(APP_ID, message_event("back online", app_id=APP_ID))
            await fake.wait_until(lambda: fake.closed_cards() == 1)
        assert ws_threads() == []
    assert ack["ack"]["code"] == 200
    assert [m.content for m in gateway.received] == ["back online"]


async def test_an_app_whose_secret_is_refused_at_start_joins_the_running_thread_later(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    apps = {"a": {"app_id": "cli_ws_a", "app_secret": "sa"}, "b": {"app_id": "cli_ws_b", "app_secret": "sb"}}
    async with FakeFeishu({"cli_ws_a": "sa", "cli_ws_b": "not-yet"}) as fake:
        async with running_channel(fake, tmp_path, apps, gateway, start_retry_s=0.05) as h:
            await fake.wait_until(lambda: "cli_ws_a" in fake.ws, timeout=10)
            assert h.channel.apps["b"].status == "failed"
            fake.apps["cli_ws_b"] = "sb"  # the secret becomes valid (say, the app was just published)
            await fake.wait_until(lambda: "cli_ws_b" in fake.ws, timeout=10)
            assert h.channel.apps["b"].status == "ready" and len(ws_threads()) == 1
            for app_id in ("cli_ws_a", "cli_ws_b"):
                await fake.push_event(app_id, message_event(f"to {app_id}", app_id=app_id, sender=f"ou_{app_id}"))
            await fake.wait_until(lambda: fake.closed_cards() == 2)
        assert ws_threads() == [] and fake.ws == {}
    assert sorted((m.cred_id, m.content) for m in gateway.received) == [("a", "to cli_ws_a"), ("b", "to cli_ws_b")]


async def test_an_event_arriving_during_shutdown_is_left_for_feishu_to_redeliver(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    apps = {"main": {"app_id": APP_ID, "app_secret": SECRET}}
    async with FakeFeishu({APP_ID: SECRET}) as fake, running_channel(fake, tmp_path, apps, gateway):
        await asyncio.wait_for(fake.ws_connected.wait(), 10)
        event = message_event("sent while restarting", app_id=APP_ID)
        gateway.accepting = False  # the daemon is draining
        refused = await fake.push_event(APP_ID, event)
        gateway.accepting = True  # Feishu's redelivery reaches a daemon that accepts again
        redelivered = await fake.push_event(APP_ID, event)
        await fake.wait_until(lambda: fake.closed_cards() == 1)
    assert refused["ack"]["code"] == 500 and redelivered["ack"]["code"] == 200
    assert [m.content for m in gateway.received] == ["sent while restarting"]  # not marked seen by the refusal
    assert [m.msg_type for m in fake.messages] == ["interactive"]  # no "restarting" reply went out


# lark-oapi itself calls the deprecated `logger.warn` when a ping meets the connection this test drops
@pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning")
async def test_a_connection_whose_reconnect_is_refused_is_restarted_with_a_new_client(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    apps = {"main": {"app_id": APP_ID, "app_secret": SECRET}}
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        with capture_logs() as logs:
            async with running_channel(fake, tmp_path, apps, gateway, start_retry_s=0.05) as h:
                await fake.wait_until(lambda: APP_ID in fake.ws, timeout=10)
                first_client = h.channel._ws.clients["main"]
                fake.refuse_endpoint[APP_ID] = 1  # say, the connection limit is hit while it reconnects
                await fake.ws[APP_ID].close()
                await fake.wait_until(lambda: APP_ID not in fake.ws)
                await fake.wait_until(lambda: fake.endpoint_requests.count(APP_ID) >= 3 and APP_ID in fake.ws, 10)
                assert h.channel.apps["main"].status == "ready"
                assert h.channel._ws.clients["main"] is not first_client and first_client.retired
                assert first_client._conn is None  # no stale connection taking a share of the events
                ack = await fake.push_event(APP_ID, message_event("after the restart", app_id=APP_ID))
                await fake.wait_until(lambda: fake.closed_cards() == 1)
        assert ws_threads() == []
    [lost] = [e for e in logs if e["event"] == "feishu_ws_lost"]
    assert lost["log_level"] == "error" and "exceed conn limit" in lost["error"]
    assert ack["ack"]["code"] == 200
    assert [m.content for m in gateway.received] == ["after the restart"]


@pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning")
async def test_a_connection_down_longer_than_ws_dead_after_s_is_restarted(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    apps = {"main": {"app_id": APP_ID, "app_secret": SECRET, "request_timeout_s": 0.2, "ws_dead_after_s": 0.5}}
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        with capture_logs() as logs:
            async with running_channel(fake, tmp_path, apps, gateway, start_retry_s=0.05) as h:
                await fake.wait_until(lambda: APP_ID in fake.ws, timeout=10)
                first_client = h.channel._ws.clients["main"]
                fake.hang_endpoint.add(APP_ID)  # the SDK keeps retrying a reconnect that never completes
                await fake.ws[APP_ID].close()
                await fake.wait_until(lambda: h.channel._ws.clients["main"] is not first_client, timeout=5)
                fake.release_endpoint(APP_ID)
                await fake.wait_until(lambda: APP_ID in fake.ws and h.channel.apps["main"].status == "ready", 10)
                ack = await fake.push_event(APP_ID, message_event("reconnected", app_id=APP_ID))
                await fake.wait_until(lambda: fake.closed_cards() == 1)
    lost = [e for e in logs if e["event"] == "feishu_ws_lost"]
    assert lost and lost[0]["log_level"] == "error" and "no connection for" in lost[0]["error"]
    assert first_client.retired and ack["ack"]["code"] == 200
    assert [m.content for m in gateway.received] == ["reconnected"]


class HeldWsStarts(ThreadPoolExecutor):
    """The event loop's default executor, except that `WsRunner.start` calls (run via `asyncio.to_thread`) wait
    for `release` while `holding`: the window in which a busy executor delays a start retry's `ws.start`."""

    def __init__(self) -> None:
        super().__init__(max_workers=4, thread_name_prefix="test-executor")
        self.holding = False
        self.release = threading.Event()
        self.held = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        target = fn.args[0] if isinstance(fn, functools.partial) and fn.args else None  # to_thread: (ctx.run, func)
        if not self.holding or getattr(target, "__qualname__", "") != "WsRunner.start":
            return super().submit(fn, *args, **kwargs)
        self.held += 1

        def held() -> Any:
            self.release.wait(10)
            return fn()

        return super().submit(held)


@pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning")
async def test_a_client_refused_right_after_a_start_retry_brought_the_app_up_is_retried_again(tmp_path: Path) -> None:
    """A start retry marks the app ready, then waits for `ws.start`; if the new client is refused meanwhile,
    the app is failed while that retry still runs: the retry must go on instead of leaving the app down."""
    gateway = ScriptedSubmitter()
    apps = {"main": {"app_id": APP_ID, "app_secret": SECRET}}
    executor = HeldWsStarts()
    asyncio.get_running_loop().set_default_executor(executor)
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        with capture_logs() as logs:
            async with running_channel(fake, tmp_path, apps, gateway, start_retry_s=0.05) as h:
                await fake.wait_until(lambda: APP_ID in fake.ws, timeout=10)
                first_client = h.channel._ws.clients["main"]
                executor.holding = True
                fake.refuse_endpoint[APP_ID] = 2  # the old client's reconnect, then the new client's connect
                await fake.ws[APP_ID].close()
                await fake.wait_until(lambda: executor.held == 1 and h.channel.apps["main"].status == "failed", 10)
                assert h.channel._ws.clients["main"] is not first_client  # refused after the retry's bring-up
                executor.release.set()
                await fake.wait_until(lambda: APP_ID in fake.ws and h.channel.apps["main"].status == "ready")
                ack = await fake.push_event(APP_ID, message_event("back for good", app_id=APP_ID))
                await fake.wait_until(lambda: fake.closed_cards() == 1)
        assert ws_threads() == []
    executor.shutdown()
    events = ("feishu_app_ready", "feishu_app_start_failed", "feishu_ws_start_failed")
    starts = [(e["event"], e.get("error")) for e in logs if e["event"] in events]
    assert starts == [
        ("feishu_app_ready", None),  # at start
        ("feishu_app_ready", None),  # the retry after the lost connection: its ws.start is held
        ("feishu_ws_start_failed", "1000040350: exceed conn limit"),  # the new client, refused meanwhile
        ("feishu_app_start_failed", "long connection lost right after start"),  # the same retry goes on…
        ("feishu_app_ready", None),  # …alone: no second retry loop for the app
    ]
    assert ack["ack"]["code"] == 200
    assert [m.content for m in gateway.received] == ["back for good"]
