"""The per-member send budget of a WeCom app on PostgreSQL: instances behind one load balancer share it, so together
they never send a member more than WeCom's per-member limit (WeCom silently drops the excess)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

from agenthub.channel import WebRoutes
from agenthub.hosting.app import channel_context
from agenthub.messages import OutboundMessage
from agenthub.storage.stores import open_stores
from channels.wecom import WeComChannel
from channels.wecom.app import MemberBudgetExhausted
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeQyApi
from tests.support.roots import make_settings
from tests.support.wecom import app_table

INSTANCES = 2
PER_MINUTE = 5
EACH = 4  # messages each instance sends to the member at the same moment: 8 asked, 5 may go


async def test_two_instances_sending_to_one_member_at_the_same_moment_never_exceed_the_window_together(
    tmp_path: Path, postgres_dsn: str, api: FakeQyApi
) -> None:
    api.member_per_minute = PER_MINUTE  # the fake drops what goes over, as WeCom does
    table = app_table(api, member_per_minute=PER_MINUTE, member_wait_max_s=1)
    async with AsyncExitStack() as stack:
        channels = []
        for n in range(INSTANCES):
            store = {"backend": "postgres", "dsn": postgres_dsn}
            settings = make_settings(tmp_path / f"instance-{n}", store=store, channels={"wecom": table})
            stores = await open_stores(settings)
            stack.push_async_callback(stores.aclose)
            context = channel_context(settings, ScriptedSubmitter(), WebRoutes(), "wecom", stores=stores)
            channel = WeComChannel(context, table)
            await channel.start()
            stack.push_async_callback(channel.stop)
            channels.append(channel)
        start = asyncio.Event()

        async def send(channel: WeComChannel, n: int) -> bool:
            await start.wait()
            note = OutboundMessage(channel="wecom", chat_id="zhangsan", content=f"提醒 {n}", cred_id="hr")
            try:
                await channel.send(note)
            except MemberBudgetExhausted:
                return False
            return True

        tasks = [asyncio.create_task(send(c, n)) for c in channels for n in range(EACH)]
        await asyncio.sleep(0)
        start.set()
        sent = await asyncio.gather(*tasks)
    assert api.dropped == []  # nothing went over WeCom's limit
    assert sent.count(True) == PER_MINUTE == len(api.sends)  # and the budget was used whole, not per instance
