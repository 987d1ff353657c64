"""AI-bot pushes on several instances: only the holder of the bot's connection sends; the others store their push
in the shared outbox (postgres) and the holder delivers it, each row at most once, also when the holder is killed
in the middle of the outbox."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agenthub.clock import ManualClock
from agenthub.errors import ChannelSendError
from agenthub.hosting.app import Services
from agenthub.messages import OutboundMessage
from agenthub.scheduler.delivery import JobDelivery
from agenthub.scheduler.jobs import Job
from agenthub.storage.lease import InProcessLeases
from agenthub.storage.outbox import UNKNOWN_OUTCOME
from agenthub.storage.postgres import Database, PostgresOutbox
from agenthub.storage.singleton import InstanceLeases
from channels.wecom import WeComChannel
from channels.wecom.aibot_relay import NOBODY_TOOK_IT
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer, channel_context
from tests.support.leases import InstanceView
from tests.support.outbox import OutboxView
from tests.support.postgres import migrated
from tests.support.wecom import bot_table, wecom_settings

LEASE_S = 15.0
SEND_WAIT_S = 3.0


class Instance:
    def __init__(self, channel: WeComChannel, view: InstanceView, outbox: OutboxView, database: Database) -> None:
        self.channel, self.view, self.outbox, self.database = channel, view, outbox, database

    @property
    def holds(self) -> bool:
        return self.channel.bots["team"].holds_connection

    async def push(self, text: str, chat_id: str = "chat-1") -> None:
        await self.channel.send(OutboundMessage("wecom", chat_id, text, cred_id="team"))

    async def kill(self) -> None:
        """kill -9: from now on nothing of it reaches the database (no renewal, no release, not the outcome of
        the push it is making); its socket closes with the process."""
        self.view.down = self.outbox.down = True
        await self.channel.stop()


class Deployment:
    def __init__(self, server: FakeAiBotServer, state_dir: Path, dsn: str) -> None:
        self.server, self.state_dir, self.dsn = server, state_dir, dsn
        self.clock = ManualClock()
        self.leases = InProcessLeases(clock=self.clock)
        self.instances: list[Instance] = []

    async def start_instance(self) -> Instance:
        n = len(self.instances)
        settings, table = wecom_settings(bot_table(self.server, send_wait_s=SEND_WAIT_S), None, {})
        view = InstanceView(self.leases)
        leases = InstanceLeases(view, holder=f"instance-{n}", ttl_s=LEASE_S, clock=self.clock)
        database = Database(self.dsn)
        outbox = OutboxView(PostgresOutbox(database))
        context = dataclasses.replace(
            channel_context(ScriptedSubmitter(), self.state_dir / str(n), settings), leases=leases, outbox=outbox
        )
        instance = Instance(WeComChannel(context, table), view, outbox, database)
        await instance.channel.start()
        self.instances.append(instance)
        return instance

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        for _ in range(30):
            await asyncio.sleep(0)

    def pushed(self) -> list[str]:
        """The text of every push that reached WeCom, on any connection."""
        return [f["body"]["markdown"]["content"] for f in self.server.sent("aibot_send_msg")]


@pytest.fixture
async def deployment(server: FakeAiBotServer, tmp_path: Path, postgres_dsn: str) -> AsyncIterator[Deployment]:
    d = Deployment(server, tmp_path, migrated(postgres_dsn))
    yield d
    for instance in d.instances:
        instance.view.down = instance.outbox.down = False
        await instance.channel.stop()
        await instance.database.close()


async def test_a_push_from_an_instance_without_the_connection_goes_out_over_the_holders(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    holder = await deployment.start_instance()
    standby = await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    assert holder.holds and not standby.holds
    await standby.push("提醒：交周报")
    assert deployment.pushed() == ["提醒：交周报"]
    assert server.connections == 1 and server.frame_connections[-1] == 1  # the holder's one connection
    await holder.push("直接发送")  # the holder itself sends directly
    assert deployment.pushed() == ["提醒：交周报", "直接发送"]


async def test_pushes_from_many_senders_at_once_each_go_out_once(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    await deployment.start_instance()
    standbys = [await deployment.start_instance(), await deployment.start_instance()]
    await server.wait_for(lambda: server.subscribed >= 1)
    texts = [f"push {i}" for i in range(16)]
    await asyncio.gather(*(standbys[i % 2].push(text) for i, text in enumerate(texts)))
    assert sorted(deployment.pushed()) == sorted(texts)
    async with deployment.instances[0].database.connection("count") as conn:
        cursor = await conn.execute("SELECT count(*) FROM outbox")
        assert await cursor.fetchone() == (0,)  # every sender took its row away once it had the outcome


async def test_without_a_holder_a_push_fails_clearly_after_send_wait_and_never_goes_out_later(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    holder = await deployment.start_instance()
    standby = await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    await holder.kill()  # its lease lives on until it expires: nobody holds the connection meanwhile
    with pytest.raises(ChannelSendError) as refused:
        await standby.push("太晚了")
    assert NOBODY_TOOK_IT in str(refused.value)
    await deployment.advance(LEASE_S)  # the standby takes over, connects and drains
    await server.wait_for(lambda: server.subscribed >= 2)
    await standby.push("之后")
    assert deployment.pushed() == ["之后"]


async def test_a_holder_killed_mid_drain_never_sends_a_row_twice_and_the_rest_go_out_from_the_next(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    holder = await deployment.start_instance()
    standby = await deployment.start_instance()
    sender = await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    server.ack_delay_s["aibot_send_msg"] = 0.5  # each delivery takes a while: the kill lands inside one
    pushes = [asyncio.create_task(sender.push(f"row {i}")) for i in range(4)]
    await server.wait_for(lambda: len(deployment.pushed()) >= 1)
    await holder.kill()
    server.ack_delay_s.clear()
    await deployment.advance(LEASE_S)
    await server.wait_for(lambda: server.subscribed >= 2)
    outcomes = await asyncio.gather(*pushes, return_exceptions=True)
    pushed = deployment.pushed()
    assert sorted(pushed) == [f"row {i}" for i in range(4)], pushed  # every row reached WeCom, none twice
    failed = {f"row {i}": o for i, o in enumerate(outcomes) if o is not None}
    under_way = pushed[0]  # claimed and sent by the dead holder, its ack never read: never sent again
    assert list(failed) == [under_way]
    assert isinstance(failed[under_way], ChannelSendError) and UNKNOWN_OUTCOME in str(failed[under_way])
    assert (standby.holds or sender.holds) and server.overlaps == 0


async def test_a_reminder_due_on_an_instance_without_the_connection_reaches_the_chat(
    deployment: Deployment, server: FakeAiBotServer, services: Services
) -> None:
    """The scheduler's lease and the bot's lease may sit on different instances: the job's delivery on the
    scheduler's instance goes out over the bot holder's connection."""
    await deployment.start_instance()
    scheduler_side = await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    job = Job(
        id="j1", agent="default", channel="wecom", chat_id="chat-1", timezone="Asia/Shanghai", created_at=0.0,
        cred_id="team", at=1.0, text="该交周报了", next_due=1.0,
    )  # fmt: skip
    await JobDelivery(services.gateway, services.scheduler, {"wecom": scheduler_side.channel})(job, 1.0)
    assert deployment.pushed() == ["该交周报了"]
    assert [f["body"]["chatid"] for f in server.sent("aibot_send_msg")] == ["chat-1"]
