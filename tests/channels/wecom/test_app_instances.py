"""Self-built app callbacks behind a load balancer: one user's messages reach different instances on one database
and are answered in the order the inbox accepted them."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer
from structlog.testing import capture_logs

from agenthub.channel import WebRoutes
from agenthub.hosting.app import channel_context
from agenthub.session_keys import SessionKey
from channels.wecom import WeComChannel
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.wecom import FakeQyApi, message_xml, serve_routes, signed_callback
from tests.support.media import png
from tests.support.scheduler import until
from tests.support.shared_gateways import Instance, shared_instances
from tests.support.wecom import AES_KEY, AGENT_ID, CORP_ID, TOKEN, app_table, text

USER = "zhangsan"
KEY = SessionKey("default", "wecom", USER)


async def app_on(instance: Instance, table: dict[str, Any], stack: AsyncExitStack) -> TestServer:
    """The WeCom channel of `instance`, wired as the composition root wires it, behind its own HTTP server."""
    gateway = instance.gateway
    inbox, leases = gateway.turn_services.inbox, gateway.leases
    context = channel_context(
        gateway.settings, gateway, WebRoutes(), "wecom", instance.stores, inbox, leases, gateway.session_of
    )
    channel = WeComChannel(context, table)
    await channel.start()
    stack.push_async_callback(channel.stop)
    server = await serve_routes(context)
    stack.push_async_callback(server.close)
    return server


async def post(http: aiohttp.ClientSession, server: TestServer, xml: str) -> int:
    query, body = signed_callback(xml, token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
    async with http.post(server.make_url("/wecom/hr/callback").with_query(query), data=body) as resp:
        return resp.status


async def test_a_users_text_on_one_instance_waits_for_their_image_still_downloading_on_another(
    api: FakeQyApi, fake_llm: FakeAnthropic, postgres_dsn: str, tmp_path: Path
) -> None:
    api.add_media("MID-pic", png(16, 16), filename="pic.png", content_type="image/png")
    download = api.media.holds["MID-pic"] = asyncio.Event()
    table = app_table(api, agent=None)  # the default agent
    image = message_xml(
        CORP_ID, USER, AGENT_ID, {"MsgType": "image", "MediaId": "MID-pic", "PicUrl": "u", "MsgId": 9101}
    )
    async with (
        shared_instances(tmp_path, fake_llm, postgres_dsn, 2) as (a, b),
        AsyncExitStack() as stack,
        aiohttp.ClientSession() as http,
    ):
        server_a, server_b = await app_on(a, table, stack), await app_on(b, table, stack)
        assert await post(http, server_a, image) == 200
        await api.media.wait_held(1)  # A took the image first: its download runs
        with capture_logs() as logs:
            assert await post(http, server_b, text("然后是这段文字", msg_id=9102, user=USER)) == 200
            await until(lambda: any(e["event"] == "arrival_order_waiting" for e in logs) or bool(api.sends), 60)
        download.set()
        await until(lambda: len(api.sends) >= 2, 60)
        history = await b.gateway.history.load(KEY)
        assert [r.get("message_id") for r in history if r["role"] == "user"] == ["9101", "9102"]
        assert len(fake_llm.message_requests()) == 2  # each answered once
