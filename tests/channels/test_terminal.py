"""The CLI REPL driven through prompt-toolkit's pipe input, against the gateway and the fake LLM (real SDK)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output.plain_text import PlainTextOutput

from agenthub.channel import ChannelContext, WebRoutes
from agenthub.config import Settings
from agenthub.errors import ConfigError
from agenthub.gateway.core import GatewayCore
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, OutboundMessage, ReplyEvent
from channels.terminal import ChatBackend, CliChannel, printable
from tests.support.fakes.anthropic import FakeAnthropic, hang, http_error, last_user_text, reply_text, reply_tool

Final = DoneEvent | ErrorEvent


class RecordingBackend:
    """Passes everything through to the real backend; reports each reply's terminal event once it is rendered."""

    def __init__(self, inner: ChatBackend) -> None:
        self.inner = inner
        self.finals: asyncio.Queue[Final] = asyncio.Queue()

    async def submit(self, text: str) -> AsyncIterator[ReplyEvent]:
        async for event in self.inner.submit(text):
            yield event  # resumes only when the REPL asks for more, i.e. after it rendered `event`
            if isinstance(event, DoneEvent | ErrorEvent):
                self.finals.put_nowait(event)

    async def abort(self) -> None:
        await self.inner.abort()

    async def next_final(self) -> Final:
        async with asyncio.timeout(10):
            return await self.finals.get()


class Repl:
    """A running REPL: type into `keys`, read what it printed with `screen()`."""

    def __init__(self, channel: CliChannel, keys: PipeInput) -> None:
        self.keys = keys
        self.backend = RecordingBackend(channel.backend)
        channel.backend = self.backend
        self._stdout = io.StringIO()
        output = PlainTextOutput(self._stdout)
        banner = "AgentHub chat · session default:http:direct"
        self.task = asyncio.create_task(channel.run_repl(label=banner, input=keys, output=output))

    def screen(self) -> str:
        return self._stdout.getvalue()

    async def say(self, keys: str) -> Final:
        self.keys.send_text(keys)
        return await self.backend.next_final()

    async def quit(self) -> int:
        self.keys.send_text("\x04")  # Ctrl-D on an empty line
        async with asyncio.timeout(10):
            return await self.task


@pytest.fixture
def keys() -> Iterator[PipeInput]:
    with create_pipe_input() as pipe:
        yield pipe


def make_channel(gateway: GatewayCore, settings: Settings, **config: Any) -> CliChannel:
    state_dir = settings.data_dir / ".channels" / "cli"
    context = ChannelContext(gateway=gateway, settings=settings, web=WebRoutes(), state_dir=state_dir)
    return CliChannel(context, config)


@pytest_asyncio.fixture
async def channel(gateway: GatewayCore, settings: Settings) -> AsyncIterator[CliChannel]:
    cli = make_channel(gateway, settings)
    await cli.start()
    yield cli
    await cli.stop()


def user_texts(fake: FakeAnthropic) -> list[str]:
    return [last_user_text(r.body or {}) for r in fake.message_requests()]


async def test_two_turns_stream_and_the_second_request_carries_the_first(
    channel: CliChannel, keys: PipeInput, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("first answer", chunks=4), reply_text("second answer"))
    repl = Repl(channel, keys)
    first = await repl.say("hello agent\r")
    second = await repl.say("and again\r")
    assert await repl.quit() == 0

    assert isinstance(first, DoneEvent) and first.full_text == "first answer"
    assert isinstance(second, DoneEvent) and second.full_text == "second answer"
    messages = (fake_llm.message_requests()[1].body or {})["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert "hello agent" in str(messages[0]["content"])
    assert "first answer" in str(messages[1]["content"])
    assert "and again" in str(messages[2]["content"])
    screen = repl.screen()
    assert screen.index("first answer\n") < screen.index("second answer\n")
    assert "session default:http:direct" in screen and "Esc+Enter" in screen  # banner with the key and the help line


async def test_ctrl_c_aborts_a_slow_turn_and_the_repl_goes_on(
    channel: CliChannel, keys: PipeInput, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(hang(), reply_text("back again"))
    repl = Repl(channel, keys)
    keys.send_text("take your time\r")
    request = (await fake_llm.wait_for_requests(1))[0]
    keys.send_text("\x03")  # Ctrl-C while the model is still thinking
    async with asyncio.timeout(10):
        await request.disconnected.wait()
    stopped = await repl.backend.next_final()
    assert isinstance(stopped, ErrorEvent) and stopped.code == "stopped"

    after = await repl.say("still there?\r")
    assert isinstance(after, DoneEvent) and after.full_text == "back again"
    assert await repl.quit() == 0
    assert "Stopped." in repl.screen()
    assert "still there?" in user_texts(fake_llm)[-1]


async def test_ctrl_c_at_the_prompt_clears_the_line(
    channel: CliChannel, keys: PipeInput, fake_llm: FakeAnthropic, gateway: GatewayCore
) -> None:
    repl = Repl(channel, keys)
    final = await repl.say("half-typed draft\x03real question\r")
    assert await repl.quit() == 0
    assert isinstance(final, DoneEvent)
    history = await gateway.history.load(gateway.resolve_key(InboundMessage("http", "direct", "x", ""))[1])
    assert history[0]["content"] == "real question"
    assert history[0]["chat_type"] == "private"  # a terminal is one person's chat
    assert len(fake_llm.message_requests()) == 1


async def test_multi_line_input_with_backslash_and_esc_enter(
    channel: CliChannel, keys: PipeInput, gateway: GatewayCore
) -> None:
    repl = Repl(channel, keys)
    await repl.say("line one\\\rline two\x1b\rline three\r")
    assert await repl.quit() == 0
    history = await gateway.history.load(gateway.resolve_key(InboundMessage("http", "direct", "x", ""))[1])
    assert history[0]["content"] == "line one\nline two\nline three"


async def test_input_history_persists_across_sessions(
    gateway: GatewayCore, settings: Settings, keys: PipeInput, fake_llm: FakeAnthropic
) -> None:
    first = make_channel(gateway, settings)
    repl = Repl(first, keys)
    await repl.say("remember this line\r")
    assert await repl.quit() == 0
    await first.stop()
    history_file = settings.data_dir / ".channels" / "cli" / "history"
    assert "+remember this line" in history_file.read_text(encoding="utf-8")

    second = make_channel(gateway, settings)
    with create_pipe_input() as keys2:
        repl2 = Repl(second, keys2)
        await repl2.say("\x1b[A\r")  # Up recalls the previous session's line, Enter sends it
        assert await repl2.quit() == 0
    await second.stop()
    history = await gateway.history.load(gateway.resolve_key(InboundMessage("http", "direct", "x", ""))[1])
    assert [m["content"] for m in history if m["role"] == "user"] == ["remember this line"] * 2


async def test_keys_typed_during_a_reply_are_kept_for_the_next_prompt(
    channel: CliChannel, keys: PipeInput, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("slow one", first_byte_delay_s=0.3), reply_text("typed ahead answer"))
    repl = Repl(channel, keys)
    keys.send_text("first\r")
    await fake_llm.wait_for_requests(1)
    keys.send_text("typed ahead\r")  # while the first reply is still on its way
    assert isinstance(await repl.backend.next_final(), DoneEvent)
    assert isinstance(await repl.backend.next_final(), DoneEvent)
    assert await repl.quit() == 0
    assert "typed ahead" in user_texts(fake_llm)[-1]


async def test_tool_use_is_shown_briefly_and_errors_clearly(
    channel: CliChannel, keys: PipeInput, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(
        reply_tool("read_memory", {}, text="Let me look."),
        reply_text("nothing stored yet"),
        http_error(401, "invalid x-api-key"),
    )
    repl = Repl(channel, keys)
    done = await repl.say("what do you remember?\r")
    failed = await repl.say("and now?\r")
    assert await repl.quit() == 0
    assert isinstance(done, DoneEvent) and isinstance(failed, ErrorEvent)
    screen = repl.screen()
    assert "⚙ read_memory…" in screen
    assert "nothing stored yet" in screen
    assert failed.message in screen and "API key" in failed.message


async def test_proactive_messages_show_up_in_the_repl(channel: CliChannel, keys: PipeInput) -> None:
    repl = Repl(channel, keys)
    await repl.say("hello\r")
    await channel.send(OutboundMessage("cli", "direct", "Reminder: stand-up in 5 minutes"))
    assert await repl.quit() == 0
    assert "Reminder: stand-up in 5 minutes" in repl.screen()


async def test_one_shot_ask_prints_command_replies_that_do_not_stream(channel: CliChannel) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert await channel.ask("/help", stdout=out, stderr=err) == 0
    assert "/stop" in out.getvalue() and out.getvalue().endswith("\n")
    assert err.getvalue() == ""


async def test_bad_channel_config_names_the_key(gateway: GatewayCore, settings: Settings, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"channels\.cli\.chat_id"):
        make_channel(gateway, settings, chat_id="")
    with pytest.raises(ConfigError, match=r"channels\.cli\.colour"):
        make_channel(gateway, settings, colour="red")
    with pytest.raises(ConfigError, match=r'channels\.cli\.locale: must be "zh-CN" or "en"$'):
        make_channel(gateway, settings, locale="fr")  # not silently the system's
    with pytest.raises(ConfigError, match=r'channels\.cli\.agnet: unknown key \(did you mean "agent"\?\)$'):
        make_channel(gateway, settings, agnet="default")


def test_model_text_cannot_drive_the_terminal() -> None:
    assert printable("ok\x1b[2J\x07 done\r\nnext\tcol\x9b") == "ok[2J done\nnext\tcol"
