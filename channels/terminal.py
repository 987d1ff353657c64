"""The CLI channel: a prompt-toolkit REPL (and one-shot mode) that talks to a chat backend and streams replies."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TextIO

import structlog
from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, History
from prompt_toolkit.input import Input
from prompt_toolkit.input.typeahead import store_typeahead
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.output import Output
from prompt_toolkit.shortcuts import print_formatted_text
from prompt_toolkit.styles import Style
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agenthub import i18n
from agenthub.channel import ChannelContext, Submitter
from agenthub.hosting.remote import CHANNEL as SESSION_CHANNEL
from agenthub.i18n import LOCALE_CHOSEN
from agenthub.messages import (
    DeltaEvent,
    DoneEvent,
    ErrorCode,
    ErrorEvent,
    InboundMessage,
    NoticeEvent,
    OutboundMessage,
    ReplyEvent,
    ToolEvent,
)
from channels.toolkit.config import check_locale, parse_table

log = structlog.get_logger(__name__)

STOP_CODES = frozenset({ErrorCode.STOPPED, ErrorCode.RESTART, ErrorCode.SHUTDOWN})
STYLE = Style.from_dict(
    {
        "tool": "#888888 italic",
        "notice": "#888888",
        "stopped": "ansiyellow",
        "error": "ansired bold",
    }
)
# C0/C1 control characters (escape sequences from a model could drive the terminal) except tab and newline.
_UNPRINTABLE = {c: None for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)] if c not in (0x09, 0x0A)}


class CliConfig(BaseModel):
    """`[channels.cli]`: who the terminal user is and which session the REPL talks to."""

    model_config = ConfigDict(extra="forbid")

    agent: str | None = Field(None, description="explicit agent; default: bindings, then the default agent")
    chat_id: str = Field("direct", min_length=1, description="session key part: <agent>:http:<chat_id>")
    sender_id: str = Field("local", min_length=1)
    history_file: Path | None = Field(None, description="input history; default data/.channels/cli/history")
    locale: str | None = Field(None, description="zh-CN or en for the texts the product writes; default: the system's")

    _known_locale = field_validator("locale")(check_locale)


class ChatBackend(Protocol):
    """What the REPL talks to (`GatewayBackend` over a Submitter: the in-process gateway, or a running daemon's
    HTTP API through `agenthub.hosting.remote.RemoteGateway`)."""

    def submit(self, text: str) -> AsyncIterator[ReplyEvent]: ...

    async def abort(self) -> None: ...


class GatewayBackend:
    """The in-process backend: each text becomes an `InboundMessage` submitted to the gateway.

    The session is `<agent>:http:<chat_id>` (`SESSION_CHANNEL`), the one a running daemon's HTTP API gives the
    same chat id: the terminal talks in one conversation whether it opens the files itself or goes through the
    daemon, and the web console shows it too. Its replies are in the terminal's locale, as the terminal chose it.
    """

    def __init__(
        self, gateway: Submitter, *, chat_id: str, sender_id: str, agent: str | None, locale: i18n.Locale
    ) -> None:
        self._gateway, self._chat_id, self._sender_id, self._agent = gateway, chat_id, sender_id, agent
        self._locale = locale

    def _message(self, text: str) -> InboundMessage:
        metadata: dict[str, object] = {"chat_type": "private", "locale": self._locale, LOCALE_CHOSEN: True}
        chat, sender = self._chat_id, self._sender_id
        return InboundMessage(SESSION_CHANNEL, chat, sender, text, agent=self._agent, metadata=metadata)

    async def submit(self, text: str) -> AsyncIterator[ReplyEvent]:
        handle = await self._gateway.submit(self._message(text))
        async for event in handle:
            yield event

    async def abort(self) -> None:
        """Stop the running turn the way a user would: the gateway's `/stop` command."""
        handle = await self._gateway.submit(self._message("/stop"))
        await handle.result()


def printable(text: str) -> str:
    """Model text made safe for a terminal: no escape sequences or other control characters."""
    return text.replace("\r\n", "\n").translate(_UNPRINTABLE)


class Printer:
    """Where a reply is rendered: streamed text, and side lines of a kind (tool, notice, stopped, error)."""

    _mid_line = False

    def _write(self, text: str) -> None:
        raise NotImplementedError

    def line(self, text: str, kind: str) -> None:
        raise NotImplementedError

    def text(self, text: str) -> None:
        if text:
            self._write(text)
            self._mid_line = not text.endswith("\n")

    def end(self) -> None:
        if self._mid_line:
            self.text("\n")


class TerminalPrinter(Printer):
    """Streams into a prompt-toolkit output; side lines are dimmed or coloured by kind."""

    def __init__(self, output: Output) -> None:
        self._output = output
        self._after_side_line = False

    def _write(self, text: str) -> None:
        self._output.write(text)
        self._output.flush()

    def text(self, text: str) -> None:
        text = printable(text)
        if self._after_side_line:  # the side line already ended the paragraph
            text = text.lstrip("\n")
        self._after_side_line = self._after_side_line and not text
        super().text(text)

    def line(self, text: str, kind: str) -> None:
        self.end()
        styled = FormattedText([(f"class:{kind}", printable(text))])
        print_formatted_text(styled, style=STYLE, output=self._output, include_default_pygments_style=False)
        self._after_side_line = True


class StreamPrinter(Printer):
    """One-shot mode: the reply alone on `out` (pipe-friendly), everything else on `err`."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def line(self, text: str, kind: str) -> None:
        self._err.write(f"{'error: ' if kind == 'error' else ''}{text}\n")
        self._err.flush()


async def render_reply(
    events: AsyncIterator[ReplyEvent], printer: Printer, locale: str
) -> DoneEvent | ErrorEvent | None:
    """Print a reply as it streams; return its terminal event (None if the stream ended without one)."""
    streamed: list[str] = []
    final: DoneEvent | ErrorEvent | None = None
    try:
        async for event in events:
            if isinstance(event, DeltaEvent):
                streamed.append(event.text)
                printer.text(event.text)
            elif isinstance(event, ToolEvent):
                if event.phase == "start":
                    printer.line(f"⚙ {event.name}…", "tool")
                elif event.is_error:
                    printer.line(i18n.text("cli.tool_failed", locale, name=event.name), "tool")
            elif isinstance(event, NoticeEvent):
                printer.line(event.text, "notice")
            elif isinstance(event, DoneEvent):
                shown = "".join(streamed)  # commands answer with a DoneEvent only; show what was not streamed
                printer.text(event.full_text[len(shown) :] if event.full_text.startswith(shown) else "")
                final = event
            else:
                printer.line(event.message, "stopped" if event.code in STOP_CODES else "error")
                final = event
        return final
    finally:
        printer.end()


class PersistentHistory(History):
    """Input history in a file, read once in a thread before the prompt and appended in a worker thread."""

    def __init__(self, path: Path, newest_first: list[str]) -> None:
        super().__init__()
        self._file = FileHistory(str(path))
        self._strings = newest_first
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cli-history")
        self._writes: list[asyncio.Future[None]] = []

    @classmethod
    async def open(cls, path: Path) -> PersistentHistory:
        def read() -> list[str]:
            path.parent.mkdir(parents=True, exist_ok=True)
            return list(FileHistory(str(path)).load_history_strings())

        return cls(path, await asyncio.to_thread(read))

    def load_history_strings(self) -> list[str]:
        return self._strings

    def store_string(self, string: str) -> None:
        write = asyncio.get_running_loop().run_in_executor(self._writer, self._file.store_string, string)
        self._writes = [w for w in self._writes if not w.done()] + [write]

    async def aclose(self) -> None:
        """Wait for pending appends, then stop the writer thread."""
        for result in await asyncio.gather(*self._writes, return_exceptions=True):
            if isinstance(result, Exception):
                log.warning("cli_history_write_failed", error=str(result))
        self._writer.shutdown(wait=False)


def key_bindings() -> KeyBindings:
    """Enter sends; a trailing backslash or Esc+Enter inserts a newline instead."""
    bindings = KeyBindings()

    @bindings.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.document.text_before_cursor.endswith("\\"):
            buffer.delete_before_cursor()
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @bindings.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return bindings


class ChatRepl:
    """The interactive loop: read a message, stream its reply, Ctrl-C stops the reply, Ctrl-D quits."""

    def __init__(self, backend: ChatBackend, session: PromptSession[str], *, label: str = "", locale: str) -> None:
        self.backend = backend
        self.locale = locale
        self._session = session
        self._label = label
        self.printer = TerminalPrinter(session.app.output)
        self._aborts: set[asyncio.Task[None]] = set()

    async def run(self) -> int:
        """Run until Ctrl-D or /exit; returns the exit code."""
        banner = self._label or "AgentHub chat"  # the chat command's line naming the session and where it runs
        self.printer.line(f"{banner}\n{i18n.text('cli.help_line', self.locale)}", "notice")
        while True:
            try:
                text = await self._session.prompt_async()
            except KeyboardInterrupt:
                continue  # Ctrl-C at the prompt: the line is dropped, ask again
            except EOFError:
                return 0
            text = text.strip()
            if text in ("/exit", "/quit"):
                return 0
            if text:
                await self.turn(text)

    async def turn(self, text: str) -> DoneEvent | ErrorEvent | None:
        """Send one message and render its reply; keys typed meanwhile are kept for the next prompt."""
        consumer = asyncio.create_task(render_reply(self.backend.submit(text), self.printer, self.locale))
        keyboard = self._session.app.input
        with keyboard.raw_mode(), keyboard.attach(lambda: self._on_keys(keyboard, consumer)):
            try:
                return await consumer
            except asyncio.CancelledError:
                if consumer.cancelled() and not _current_task_cancelling():
                    self.printer.line(i18n.text("cli.stopped_waiting", self.locale), "stopped")
                    return None
                raise
            except Exception as e:  # a backend failure ends this turn, never the REPL
                log.warning("cli_turn_failed", error=str(e), error_type=type(e).__name__)
                self.printer.line(i18n.text("cli.no_reply", self.locale, error=e), "error")
                return None
            finally:
                await self._settle_aborts()

    def _on_keys(self, keyboard: Input, consumer: asyncio.Task[Any]) -> None:
        pressed = keyboard.read_keys()
        kept = [key for key in pressed if key.key != Keys.ControlC]
        if kept:
            store_typeahead(keyboard, kept)
        if len(kept) == len(pressed):
            return
        if self._aborts:  # a second Ctrl-C: stop waiting even if the backend has not answered the stop yet
            consumer.cancel()
            for task in self._aborts:
                task.cancel()
            return
        self.printer.line("^C stopping…", "notice")
        task = asyncio.create_task(self.backend.abort())
        self._aborts.add(task)

    async def _settle_aborts(self) -> None:
        for task in list(self._aborts):
            try:
                await task
            except asyncio.CancelledError:
                if _current_task_cancelling():
                    raise
            except Exception as e:
                log.warning("cli_abort_failed", error=str(e))
        self._aborts.clear()


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class CliChannel:
    """The terminal channel; `run_repl()` talks interactively, `ask()` answers one message."""

    name = "cli"

    def __init__(self, context: ChannelContext, config: Mapping[str, Any]) -> None:
        self.config = parse_table(CliConfig, config, self.name)
        self._context = context
        self.locale = i18n.normalise_locale(self.config.locale) or i18n.channel_locale(context.settings, self.name)
        self.backend: ChatBackend = GatewayBackend(
            context.gateway,
            chat_id=self.config.chat_id,
            sender_id=self.config.sender_id,
            agent=self.config.agent,
            locale=self.locale,
        )
        self._repl: ChatRepl | None = None
        self._history: PersistentHistory | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        if self._history is None:
            path = self.config.history_file or self._context.state_dir / "history"
            self._history = await PersistentHistory.open(path)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except asyncio.CancelledError:
                if _current_task_cancelling():
                    raise
        self._tasks.clear()
        history, self._history = self._history, None
        if history is not None:
            await history.aclose()

    async def send(self, message: OutboundMessage) -> None:
        """A proactive message: shown above the prompt, or printed when no REPL runs."""
        if self._repl is not None:
            printer = self._repl.printer
            await run_in_terminal(lambda: printer.line(message.content, "notice"))
        else:
            print(printable(message.content), flush=True)

    async def ask(self, text: str, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
        """One-shot mode: the reply on stdout and 0, or the error on stderr and 1."""
        printer = StreamPrinter(stdout or sys.stdout, stderr or sys.stderr)
        final = await render_reply(self.backend.submit(text), printer, self.locale)
        if final is None:
            printer.line(i18n.text("cli.no_answer", self.locale), "error")
        return 0 if isinstance(final, DoneEvent) else 1

    async def ask_lines(self, lines: TextIO) -> int:
        """Input that is not a terminal (`… | agenthub chat`): each non-empty line one message, answered in turn as
        `ask` does (no prompt, no toolbar); 0 when every reply came, else 1."""
        code = 0
        while line := await asyncio.to_thread(lines.readline):
            if line.strip():
                code = max(code, await self.ask(line.rstrip("\n")))
        return code

    async def run_repl(self, *, label: str = "", input: Input | None = None, output: Output | None = None) -> int:
        """The interactive REPL until Ctrl-D or /exit."""
        await self.start()
        session: PromptSession[str] = PromptSession(
            "› ",
            multiline=True,
            prompt_continuation="  ",
            key_bindings=key_bindings(),
            history=self._history,
            bottom_toolbar=i18n.text("cli.toolbar", self.locale),
            style=STYLE,
            input=input,
            output=output,
        )
        self._repl = ChatRepl(self.backend, session, label=label, locale=self.locale)
        task = asyncio.create_task(self._repl.run(), name="cli-repl")
        self._tasks.add(task)
        try:
            return await task
        finally:
            self._tasks.discard(task)
            self._repl = None
