"""One AI-bot connection per deployment: only the holder of lease `wecom-bot:<cred_id>` connects; a standby
takes over when the holder stops (at once) or dies (after the lease expires), never while it is connected."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agenthub.clock import ManualClock
from agenthub.storage.lease import InProcessLeases
from agenthub.storage.singleton import InstanceLeases
from channels.wecom import WeComChannel
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer, channel_context
from tests.support.leases import InstanceView
from tests.support.wecom import bot_table, wecom_settings

LEASE_S = 15.0


class Instance:
    def __init__(self, channel: WeComChannel, view: InstanceView) -> None:
        self.channel, self.view = channel, view

    @property
    def holds(self) -> bool:
        lease = self.channel.bots["team"].lease
        return lease is not None and lease.running

    async def kill(self) -> None:
        """kill -9: the process is gone, so is its socket (the OS closes it); its lease is never released."""
        self.view.down = True
        await self.channel.stop()


class Deployment:
    def __init__(self, server: FakeAiBotServer, state_dir: Path) -> None:
        self.server, self.state_dir = server, state_dir
        self.clock = ManualClock()
        self.leases = InProcessLeases(clock=self.clock)
        self.instances: list[Instance] = []

    async def start_instance(self) -> Instance:
        n = len(self.instances)
        settings, table = wecom_settings(bot_table(self.server), None, {})
        view = InstanceView(self.leases)
        leases = InstanceLeases(view, holder=f"instance-{n}", ttl_s=LEASE_S, clock=self.clock)
        context = dataclasses.replace(
            channel_context(ScriptedSubmitter(), self.state_dir / str(n), settings), leases=leases
        )
        instance = Instance(WeComChannel(context, table), view)
        await instance.channel.start()
        self.instances.append(instance)
        return instance

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        for _ in range(30):
            await asyncio.sleep(0)

    def holders(self) -> list[bool]:
        return [i.holds for i in self.instances]


@pytest.fixture
async def deployment(server: FakeAiBotServer, tmp_path: Path) -> AsyncIterator[Deployment]:
    d = Deployment(server, tmp_path)
    yield d
    for instance in d.instances:
        await instance.channel.stop()


async def test_of_two_instances_exactly_one_connects_and_subscribes(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    first = await deployment.start_instance()
    second = await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    for _ in range(3):
        await deployment.advance(LEASE_S / 3)  # renewals; the standby keeps trying
    assert deployment.holders() == [True, False]
    assert (server.connections, server.subscribed, server.overlaps) == (1, 1, 0)
    assert first.channel.bots["team"].conn is not None and first.channel.bots["team"].conn.connects == 1
    assert second.channel.bots["team"].conn is not None and second.channel.bots["team"].conn.connects == 0


async def test_a_stopped_holder_closes_first_and_the_standby_subscribes_at_its_next_attempt(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    first = await deployment.start_instance()
    await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    await first.channel.stop()  # a rolling restart: the lease is released once the socket is closed
    assert server.live == 0
    await deployment.advance(LEASE_S / 3)
    await server.wait_for(lambda: server.subscribed >= 2)
    assert deployment.holders() == [False, True] and server.overlaps == 0


async def test_a_killed_holder_is_replaced_after_its_lease_expires_never_before(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    first = await deployment.start_instance()
    await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    await first.kill()
    for _ in range(2):  # the dead holder's lease is still live: the standby waits
        await deployment.advance(LEASE_S / 3)
        assert deployment.holders() == [False, False]
    await deployment.advance(LEASE_S / 3)  # lease_s after the last renewal: expired, taken over
    await server.wait_for(lambda: server.subscribed >= 2)
    assert deployment.holders() == [False, True] and server.overlaps == 0


async def test_a_holder_cut_off_from_the_store_closes_its_socket_before_the_standby_may_connect(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    """The holder is alive and connected but cannot renew: it must close the connection while its lease is
    still live, so the standby, which may connect the moment the lease expires, never meets a live one."""
    first = await deployment.start_instance()
    await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    first.view.down = True
    await deployment.advance(LEASE_S / 3)
    assert deployment.holders() == [True, False]  # still within the lease, with time to spare
    await deployment.advance(LEASE_S / 3)
    await server.wait_for(lambda: server.live == 0)  # closed by its own keeper, the lease not yet expired
    assert deployment.holders() == [False, False]
    await deployment.advance(LEASE_S / 3)
    await server.wait_for(lambda: server.subscribed >= 2)
    assert deployment.holders() == [False, True] and server.overlaps == 0
    first.view.down = False


async def test_only_the_instance_holding_the_connection_may_take_over_the_bot_s_stored_messages(
    deployment: Deployment, server: FakeAiBotServer
) -> None:
    first = await deployment.start_instance()
    second = await deployment.start_instance()
    await server.wait_for(lambda: server.subscribed >= 1)
    source = first.channel.bots["team"].gate.source
    assert [first.channel.can_resume(source), second.channel.can_resume(source)] == [True, False]
    assert not second.channel.can_resume("wecom:bot:unknown")
    await first.channel.stop()
    await deployment.advance(LEASE_S / 3)
    await server.wait_for(lambda: server.subscribed >= 2)
    assert [first.channel.can_resume(source), second.channel.can_resume(source)] == [False, True]
