"""Every reply the product writes itself reaches WeCom and Feishu users in zh-CN, and in en where configured.

Real commands and turns go through the gateway (on the fake Messages API) with the channel names of WeCom and
Feishu; the expected texts are looked up in the catalogue, so the tests check which locale was chosen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from agenthub import i18n
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.gateway.handle import ReplyHandle
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, NoticeEvent, ReplyEvent, Route
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, reply_text, server_error


@dataclass(frozen=True)
class Case:
    channel: str
    channels: dict[str, dict[str, Any]]
    locale: str
    agent: str | None = None
    agent_locale: str | None = None


CASES = [
    Case("wecom", {}, "zh-CN"),
    Case("feishu", {}, "zh-CN"),
    Case("wecom", {"wecom": {"locale": "en"}}, "en"),
    Case("feishu", {"feishu": {"locale": "en"}}, "en"),
    Case("wecom", {}, "en", agent="helper", agent_locale="en"),  # the agent's locale wins over the channel's
    Case("feishu", {"feishu": {"locale": "en"}}, "zh-CN", agent="helper", agent_locale="zh-CN"),
]
IDS = [f"{c.channel}-{c.locale}" + (f"-agent_{c.agent_locale}" if c.agent else "") for c in CASES]


@dataclass
class Chat:
    gateway: GatewayCore
    case: Case
    chat_id: str = "group-1"

    def said(self, key: str, **params: Any) -> str:
        """What the user should read: the catalogue text in the locale this case expects."""
        return i18n.text(key, self.case.locale, **params)

    async def submit(self, content: str, sender: str = "alice", **kw: Any) -> ReplyHandle:
        message = InboundMessage(self.case.channel, self.chat_id, sender, content, agent=self.case.agent, **kw)
        return await self.gateway.submit(message)

    async def reply(self, content: str, sender: str = "alice", **kw: Any) -> DoneEvent | ErrorEvent:
        return await (await self.submit(content, sender, **kw)).result()

    async def events(self, content: str, **kw: Any) -> list[ReplyEvent]:
        return [e async for e in await self.submit(content, **kw)]


def _settings_for(case: Case, factory: Callable[..., Settings], **overrides: Any) -> Settings:
    settings = factory(channels=case.channels, **overrides)
    if case.agent is not None:
        write_agent(settings.agents_dir, case.agent, {"locale": case.agent_locale})
    return settings


@pytest_asyncio.fixture(params=CASES, ids=IDS)
async def chat(request: pytest.FixtureRequest, settings_factory: Callable[..., Settings]) -> AsyncIterator[Chat]:
    case: Case = request.param
    async with build_gateway(_settings_for(case, settings_factory, llm={"max_retries": 0})) as gateway:
        yield Chat(gateway, case)


def _done_text(final: DoneEvent | ErrorEvent) -> str:
    assert isinstance(final, DoneEvent), final
    return final.full_text


async def test_help_lists_every_registered_command_in_the_chats_locale(chat: Chat) -> None:
    said = _done_text(await chat.reply("/help"))
    lines = said.splitlines()
    assert lines[0] == chat.said("command.help.title")
    registered = chat.gateway.commands.help_text(chat.case.locale).splitlines()
    assert lines[1:] == registered and len(registered) >= 5
    for name in ("restart", "stop", "status", "compact", "help"):
        assert f"/{name} — {chat.said(f'command.help.{name}')}" in lines


async def test_status_stop_restart_and_compact_answer_in_the_chats_locale(chat: Chat, fake_llm: FakeAnthropic) -> None:
    status = _done_text(await chat.reply("/status")).splitlines()
    assert status[0] == chat.said("command.status.agent", agent=chat.case.agent or "default")
    assert chat.said("command.status.state", state=chat.said("command.status.state.idle")) in status
    assert _done_text(await chat.reply("/stop")) == chat.said("command.stop.nothing")
    assert _done_text(await chat.reply("/compact")) == chat.said("compaction.nothing", count=0)
    window = int(chat.gateway.settings.session.restart_confirm_s)
    assert _done_text(await chat.reply("/restart")) == chat.said("command.restart.confirm", seconds=window)
    assert _done_text(await chat.reply("/restart")) == chat.said("command.restart.done")


async def test_stopping_a_running_reply_is_told_in_the_chats_locale(chat: Chat, fake_llm: FakeAnthropic) -> None:
    never = asyncio.Event()
    fake_llm.script(reply_text("never sent", hold=never))
    running = await chat.submit("a long question")
    await fake_llm.wait_for_requests(1)
    refused = _done_text(await chat.reply("/stop", sender="bob"))
    assert refused == chat.said("command.stop.not_yours")
    joiner = "" if chat.case.locale == "zh-CN" else " "
    stopped = _done_text(await chat.reply("/stop"))
    assert stopped == joiner.join([chat.said("command.stop.stopped"), chat.said("command.stop.kept")])
    final = await running.result()
    assert isinstance(final, ErrorEvent) and final.code == "stopped" and final.message == chat.said("abort.stopped")


async def test_queue_notices_and_the_joined_answer_are_in_the_chats_locale(chat: Chat, fake_llm: FakeAnthropic) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("first", hold=release), reply_text("both"))
    first = await chat.submit("one")
    await fake_llm.wait_for_requests(1)
    second, third = await chat.submit("two"), await chat.submit("three")  # they wait together behind "one"
    release.set()
    assert _done_text(await first.result()) == "first"
    second_events = [e async for e in second]
    third_events = [e async for e in third]
    notices = [e.text for e in third_events if isinstance(e, NoticeEvent)]
    assert chat.said("notice.queued", count=2) in notices
    joined = second_events[-1]
    assert isinstance(joined, DoneEvent) and joined.joined and joined.full_text == chat.said("done.answered_together")
    assert isinstance(third_events[-1], DoneEvent) and third_events[-1].full_text == "both"


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_a_full_queue_is_refused_in_the_chats_locale(
    case: Case, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("a", hold=release), reply_text("b"))
    async with build_gateway(_settings_for(case, settings_factory, session={"max_queued": 1})) as gateway:
        chat = Chat(gateway, case)
        running = await chat.submit("one")
        await fake_llm.wait_for_requests(1)
        queued = await chat.submit("two")
        refused = await chat.reply("three")
        assert isinstance(refused, ErrorEvent) and refused.code == "queue_full"
        assert refused.message == chat.said("error.queue_full", limit=1)
        release.set()
        assert _done_text(await running.result()) == "a" and _done_text(await queued.result()) == "b"


async def test_a_failed_model_call_is_explained_in_the_chats_locale(chat: Chat, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(server_error(500))
    final = await chat.reply("hi")
    assert isinstance(final, ErrorEvent) and final.code == "llm_error"
    assert final.message == chat.said("llm.busy")


async def test_an_unusable_model_hint_is_noticed_in_the_chats_locale(chat: Chat, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("answered anyway"))
    events = await chat.events("hi", model_hint="not a model")
    notices = [e.text for e in events if isinstance(e, NoticeEvent)]
    agent = chat.gateway.route(Route(chat.case.channel, "x", agent=chat.case.agent))
    _, model, _ = chat.gateway.providers.resolve(None, None, agent.config.provider, agent.config.model)
    expected = chat.said("llm.hint.model_unusable", model=repr("not a model"), fallback=repr(model))
    assert notices == [expected]
    assert isinstance(events[-1], DoneEvent) and events[-1].full_text == "answered anyway"


async def test_an_unknown_agent_is_refused_in_the_channels_locale(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    for channels, locale in (({}, "zh-CN"), ({"wecom": {"locale": "en"}}, "en")):
        async with build_gateway(settings_factory(channels=channels)) as gateway:
            final = await (await gateway.submit(InboundMessage("wecom", "c", "a", "hi", agent="ghost"))).result()
            assert isinstance(final, ErrorEvent) and final.code == "unknown_agent"
            assert final.message == i18n.text("error.unknown_agent", locale, agent="ghost")


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_the_offline_stand_in_answers_in_the_chats_locale(
    case: Case, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(_settings_for(case, settings_factory, llm={"offline": True})) as gateway:
        chat = Chat(gateway, case)
        said = _done_text(await chat.reply("你好 hello"))
        echo = chat.said("llm.offline.echo", said="你好 hello")
        assert said == chat.said("llm.offline.reply", echo=echo)
    assert fake_llm.message_requests() == []


async def test_the_models_language_is_the_users_whatever_the_locale(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    """The default persona tells the model to answer in the user's language, and a chat's locale changes only the
    product's own texts: the system prompt is the same in a zh-CN and an en chat."""
    systems = []
    for channels in ({}, {"wecom": {"locale": "en"}}):
        async with build_gateway(settings_factory(channels=channels)) as gateway:
            fake_llm.script(reply_text("ok"))
            await (await gateway.submit(InboundMessage("wecom", "c", "a", "Bonjour"))).result()
        systems.append(fake_llm.message_requests()[-1].body["system"])  # type: ignore[index]
    assert systems[0] == systems[1]
    assert "answer in the language the user writes in" in systems[0][0]["text"].lower()


@pytest.mark.parametrize("channel", ["wecom", "http", "feishu"])
async def test_where_no_locale_is_set_the_offline_reply_follows_the_language_the_user_wrote_in(
    channel: str, settings_factory: Callable[..., Settings]
) -> None:
    async with build_gateway(settings_factory(llm={"offline": True})) as gateway:
        for content, locale in (("hello, who are you?", "en"), ("你好，你是谁？", "zh-CN")):
            handle = await gateway.submit(InboundMessage(channel, f"c-{locale}", "alice", content))
            said = _done_text(await handle.result())
            echo = i18n.text("llm.offline.echo", locale, said=content)
            assert said == i18n.text("llm.offline.reply", locale, echo=echo)


async def test_the_terminal_s_offline_reply_keeps_the_system_locale_of_its_own_texts(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    async with build_gateway(settings_factory(llm={"offline": True})) as gateway:
        said = _done_text(await (await gateway.submit(InboundMessage("cli", "direct", "local", "你好"))).result())
    assert said == i18n.text("llm.offline.reply", "en", echo=i18n.text("llm.offline.echo", "en", said="你好"))
