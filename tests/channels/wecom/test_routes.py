"""A callback is stored with the session its submitted message runs in: the inbox names it from the callback's
route (chat, agent, credential), by the gateway's rule, before any message is built."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agenthub.config import Settings
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer
from tests.support.routing import naming
from tests.support.wecom import BotHarness, Harness, text


async def test_app_callbacks_are_stored_with_their_messages_sessions_by_binding_and_by_the_apps_agent(
    harness: Harness, settings_factory: Callable[..., Settings]
) -> None:
    async with naming(settings_factory(bindings={"wecom:hr": "reviewer"})) as routes:
        harness.session_of = routes
        await harness.start(agent=None)  # routed by the binding of its credential
        assert (await harness.post(text("你好", msg_id=7101)))[0] == 200
        await harness.submitter.wait_for(1)
        await harness.restart(agent="other")
        assert (await harness.post(text("再问", msg_id=7102, user="lisi")))[0] == 200
        await harness.submitter.wait_for(2)
        assert routes.named == ["reviewer:wecom:zhangsan", "other:wecom:lisi"]
        assert routes.named == routes.sessions_of(harness.submitter.received)


@pytest.fixture
async def bot(server: FakeAiBotServer, tmp_path: Path) -> AsyncIterator[BotHarness]:
    h = BotHarness(server, ScriptedSubmitter(), tmp_path)
    yield h
    if h.channel is not None:
        await h.channel.stop()


async def test_bot_callbacks_in_a_chat_and_a_group_are_stored_with_their_messages_sessions(
    bot: BotHarness, server: FakeAiBotServer, settings_factory: Callable[..., Settings]
) -> None:
    async with naming(settings_factory(bindings={"wecom": "other"})) as routes:
        bot.session_of = routes
        await bot.start(agent=None)  # routed by the channel's binding
        await server.send_message(server.text_body("单聊", msgid="r-1"))
        group = server.text_body("@AgentHub 群聊", msgid="r-2", user="lisi", chattype="group", chatid="wrkgrp01")
        await server.send_message(group)
        await bot.gateway.wait_for(2)
        assert routes.named == ["other:wecom:zhangsan", "other:wecom:wrkgrp01"]
        assert routes.named == routes.sessions_of(bot.gateway.received)


async def test_a_bots_per_member_group_session_is_stored_as_its_message_runs(
    bot: BotHarness, server: FakeAiBotServer, settings_factory: Callable[..., Settings]
) -> None:
    async with naming(settings_factory()) as routes:
        bot.session_of = routes
        await bot.start(session_per_member=True)  # the bot's own agent: helper
        group = server.text_body("@AgentHub 你好", msgid="r-3", user="lisi", chattype="group", chatid="wrkgrp01")
        await server.send_message(group)
        await bot.gateway.wait_for(1)
        assert routes.named == ["helper:wecom:wrkgrp01:lisi"]
        assert routes.named == routes.sessions_of(bot.gateway.received)
