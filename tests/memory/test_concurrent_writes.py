"""Memory file writers at the same moment: write_memory from many chats racing an L3 rewrite of the same file,
a compaction's memory flush beside an L3 run of other files, and a writer cancelled while its replace runs."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenthub.agent.tools import PLATFORM_TOOLS, ToolContext, run_tool
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.memory.files import MemoryWriter
from agenthub.memory.processor import MAX_PARALLEL_CALLS
from agenthub.memory.wiring import L3_TIMER
from agenthub.session_keys import session_key
from agenthub.storage.memory_files import FileMemoryStore, MemoryName
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.gated_pool import GatedPool
from tests.support.memory import (
    chat_memory_file,
    gateway_on,
    is_l3_request,
    is_summary_request,
    msg,
    seed,
    system_text,
)
from tests.support.roots import make_settings

CHATS = 16
APPENDS_EACH = 10
L3_LINE = "- summary line written by an L3 rewrite"


def _fact(chat: int, n: int) -> str:
    return f"- chat {chat:02d} fact {n:02d}"


def _current_file(body: dict[str, Any]) -> str:
    found = re.search(r"<current-file>\n(.*)\n</current-file>", str(body["messages"][0]["content"]), re.S)
    text = found.group(1) if found else ""
    return "" if text == "(empty)" else text


class Gate:
    """Holds the fake model's answers until `expected` requests have arrived, then the test releases them at once."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0
        self.all_arrived = asyncio.Event()
        self.release = asyncio.Event()

    def held(self, reply: ScriptedReply) -> ScriptedReply:
        self.arrived += 1
        if self.arrived >= self.expected:
            self.all_arrived.set()
        reply.hold = self.release
        return reply


def _l3_keeping_the_file(gate: Gate) -> Callable[[dict[str, Any]], ScriptedReply | None]:
    """L3 answers that keep the whole current file and add one line, held at `gate`."""

    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        if not is_l3_request(body):
            return None
        current = _current_file(body)
        return gate.held(reply_text((current + "\n" if current else "") + L3_LINE))

    return respond


async def test_sixteen_chats_appending_at_once_keep_every_fact_while_l3_rewrites(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    gate = Gate(expected=2)  # the MEMORY.md and the USER.md rewrite
    fake_llm.responder = _l3_keeping_the_file(gate)
    settings = settings_factory()
    write_agent(settings.agents_dir, "default", {"memory": {"scope": "agent"}})  # sixteen WeCom chats, one file
    async with build_gateway(settings) as gw:
        agent = gw.agents.get("default")
        await seed(gw, gw.resolve_key(msg("x"))[1], 2)
        l3 = asyncio.create_task(gw.timers[L3_TIMER].tick_now())
        await gate.all_arrived.wait()
        workspace = gw.settings.workspace_dir / agent.name
        contexts = [
            ToolContext(agent, session_key(agent.name, "wecom", f"chat{c}"), f"user{c}", gw.memory_files, workspace)
            for c in range(CHATS)
        ]
        appends = [
            run_tool(list(PLATFORM_TOOLS), "write_memory", {"content": _fact(c, n)}, ctx)
            for n in range(APPENDS_EACH)
            for c, ctx in enumerate(contexts)
        ]
        gate.release.set()  # the L3 answers come back while the appends run
        results = await asyncio.gather(*appends)
        await l3

        assert all(not is_error and text.startswith("memory saved") for text, is_error in results)
        memory = gw.history.layout("default").memory_file.read_text(encoding="utf-8")
        missing = [_fact(c, n) for c in range(CHATS) for n in range(APPENDS_EACH) if _fact(c, n) not in memory]
        assert missing == []
        assert L3_LINE in memory  # the rewrite was written, not refused, and kept what was appended meanwhile


def _turns_writing_memory(gate: Gate) -> Callable[[dict[str, Any]], ScriptedReply | None]:
    """A turn's first call answers `write_memory` with the fact the user sent (held at `gate`), the second says ok;
    L3 calls keep the file and add a line (held at the same gate)."""
    l3 = _l3_keeping_the_file(gate)

    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        if is_l3_request(body):
            return l3(body)
        last = body["messages"][-1]["content"]
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last):
            return reply_text("saved")
        fact = "".join(b.get("text", "") for b in last if isinstance(b, dict)).split("\n\n[")[0]
        return gate.held(reply_tool("write_memory", {"content": fact}))

    return respond


async def test_write_memory_tool_calls_of_sixteen_chats_released_together_keep_every_fact(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    rounds = APPENDS_EACH
    async with build_gateway(settings_factory()) as gw:
        for r in range(rounds):
            gate = Gate(expected=CHATS + 2)  # sixteen turns and this round's L3 rewrite of MEMORY.md and USER.md
            fake_llm.responder = _turns_writing_memory(gate)
            handles = [await gw.submit(msg(_fact(c, r), chat=f"chat{c}")) for c in range(CHATS)]
            await seed(gw, gw.resolve_key(msg("x", chat="l3"))[1], 1, start=r)  # new L3 material every round
            l3 = asyncio.create_task(gw.timers[L3_TIMER].tick_now())
            await gate.all_arrived.wait()
            gate.release.set()
            finals = [await handle.result() for handle in handles]
            await l3
            assert [getattr(f, "full_text", None) for f in finals] == ["saved"] * CHATS

        tool_results = [
            b["content"]
            for request in fake_llm.message_requests()
            for b in (request.body or {})["messages"][-1]["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        assert len(tool_results) == CHATS * rounds and all(t.startswith("memory saved") for t in tool_results)
        memory = gw.history.layout("default").memory_file.read_text(encoding="utf-8")
        missing = [_fact(c, r) for c in range(CHATS) for r in range(rounds) if _fact(c, r) not in memory]
        assert missing == []
        assert memory.count(L3_LINE) >= 1


async def test_a_compaction_flush_does_not_wait_for_an_l3_run_of_other_files(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(llm={"timeout_s": 60.0})  # the held L3 calls must not time out meanwhile
    others = [f"agent{i}" for i in range(MAX_PARALLEL_CALLS + 1)]  # more L3 calls than the run lets out at once
    for name in others:
        write_agent(settings.agents_dir, name)
    gate = Gate(expected=MAX_PARALLEL_CALLS)
    l3 = _l3_keeping_the_file(gate)

    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        if is_summary_request(body):
            return reply_text("用户在做项目 X。")
        if "the assistant agent 'default'" in system_text(body):  # the flush of default's MEMORY.md
            return reply_text("- default remembers project X")
        return l3(body)

    fake_llm.responder = respond
    async with build_gateway(settings) as gw:
        for name in others:
            await seed(gw, gw.resolve_key(msg("x", agent=name))[1], 2)
        run = asyncio.create_task(gw.timers[L3_TIMER].tick_now())
        await gate.all_arrived.wait()  # the L3 run is in its model calls, holding as many as it may
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 25)
        async with asyncio.timeout(60):  # only a guard against a hang: the flush used to wait for the whole run
            final = await (await gw.submit(msg("/compact"))).result()
        assert not run.done()
        assert getattr(final, "full_text", "").startswith("Compacted")
        memory = chat_memory_file(gw, gw.agents.get("default"), key).read_text(encoding="utf-8")
        assert memory == "- default remembers project X\n"
        gate.release.set()
        await run
        for name in others:
            assert L3_LINE in gw.history.layout(name).memory_file.read_text(encoding="utf-8")


async def _reply_text(gw: GatewayCore, text: str) -> str:
    final = await (await gw.submit(msg(text))).result()
    return str(getattr(final, "full_text", ""))


async def test_a_flush_whose_file_an_l3_run_replaced_meanwhile_merges_again(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    l3_gate, flush_gate = Gate(expected=1), Gate(expected=1)
    flush_answers: list[str] = []

    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        if is_summary_request(body):
            return reply_text("用户在做项目 X。")
        if "You maintain USER.md" in system_text(body):
            return reply_text("# User")
        if "question 10" in str(body["messages"]):  # the flush: it sees the messages being compacted
            flush_answers.append(_current_file(body))
            reply = reply_text(_current_file(body) + "\n- flushed: project X")
            return flush_gate.held(reply) if len(flush_answers) == 1 else reply
        rewrite = "# Rewritten by L3\n" + _current_file(body) + "\n" + L3_LINE  # not an append: a new text
        return l3_gate.held(reply_text(rewrite)) if is_l3_request(body) else None

    fake_llm.responder = respond
    async with build_gateway(settings_factory(llm={"timeout_s": 60.0})) as gw:
        key = gw.resolve_key(msg("x"))[1]
        memory_file = chat_memory_file(gw, gw.agents.get("default"), key)
        memory_file.parent.mkdir(parents=True)
        memory_file.write_text("- an old fact\n", encoding="utf-8")
        await seed(gw, gw.resolve_key(msg("x", chat="other"))[1], 2)
        run = asyncio.create_task(gw.timers[L3_TIMER].tick_now())
        await l3_gate.all_arrived.wait()  # the L3 run read the file and waits for its answer
        await seed(gw, key, 25)
        compact = asyncio.create_task(_reply_text(gw, "/compact"))
        await flush_gate.all_arrived.wait()  # the flush read the same file and waits for its answer
        l3_gate.release.set()
        await run  # L3 replaced the file under the flush
        flush_gate.release.set()
        final = await compact

        assert final.startswith("Compacted")
        rewritten = "# Rewritten by L3\n- an old fact\n" + L3_LINE
        assert flush_answers == ["- an old fact", rewritten]  # merged again, into the text L3 wrote
        assert memory_file.read_text(encoding="utf-8") == rewritten + "\n- flushed: project X\n"


def _held_replace(loop: asyncio.AbstractEventLoop, path: Path) -> GatedPool:
    """The first atomic replace of `path` starts and then waits for the pool's gate."""

    def chooses(func: Any, args: tuple[Any, ...]) -> bool:
        return getattr(func, "__name__", "") == "atomic_write_text" and args[:1] == (path,)

    return GatedPool(loop, chooses)


async def _yield_often() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_writer_cancelled_during_its_replace_keeps_the_file_until_it_lands(tmp_path: Path) -> None:
    store = FileMemoryStore(tmp_path / "data", tmp_path / "auth")
    name = MemoryName.agent_memory("default")
    (tmp_path / "data/default/memory").mkdir(parents=True)
    path = store.path_of(name)
    loop = asyncio.get_running_loop()
    executor = _held_replace(loop, path)
    loop.set_default_executor(executor)
    writer = MemoryWriter(store)
    first = asyncio.create_task(writer.update(name, lambda old: old + "- fact A\n"))
    await asyncio.wait_for(executor.started.wait(), 5)  # A's replace runs in its thread
    first.cancel()  # /stop, a lock timeout, /restart or shutdown of the chat writing A
    second = asyncio.create_task(writer.update(name, lambda old: old + "- fact B\n"))
    await _yield_often()
    assert not first.done() and not second.done()  # B waits for A's replace to land
    executor.gate.set()
    try:
        await first
        raise AssertionError("the cancelled writer must see its cancellation")
    except asyncio.CancelledError:
        pass
    assert await second == "- fact A\n- fact B\n"
    assert path.read_text(encoding="utf-8") == "- fact A\n- fact B\n"


async def test_an_l3_run_cancelled_during_its_replace_loses_no_fact_written_after(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = lambda body: reply_text("- rewritten by L3") if is_l3_request(body) else None
    async with build_gateway(settings_factory()) as gw:
        memory_file = gw.history.layout("default").memory_file
        await seed(gw, gw.resolve_key(msg("x"))[1], 2)
        loop = asyncio.get_running_loop()
        executor = _held_replace(loop, memory_file)
        loop.set_default_executor(executor)
        run = asyncio.create_task(gw.timers[L3_TIMER].tick_now())
        await asyncio.wait_for(executor.started.wait(), 5)
        run.cancel()  # shutdown (or the timeout) hitting the run while its replace is in the worker thread
        writer = gw.memory_files.writer
        name = gw.memory_files.memory_name(gw.agents.get("default"))
        saved = asyncio.create_task(writer.update(name, lambda old: old + "- saved by write_memory\n"))
        await _yield_often()
        assert not run.done()
        executor.gate.set()
        await asyncio.gather(run, return_exceptions=True)
        assert await saved == "- rewritten by L3\n- saved by write_memory\n"
        assert memory_file.read_text(encoding="utf-8") == "- rewritten by L3\n- saved by write_memory\n"


def _two_instances(tmp_path: Path, fake_llm: FakeAnthropic, dsn: str) -> list[Settings]:
    """Two hosts on one PostgreSQL: each its own directories (and, through `gateway_on`, its own pool)."""
    store = {"backend": "postgres", "dsn": dsn}
    return [make_settings(tmp_path / name, fake_llm.base_url, store=store) for name in ("a", "b")]


async def test_write_memory_of_sixteen_turns_on_two_instances_released_together_keep_every_fact(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """One agent-wide MEMORY.md in the database, sixteen CLI chats (eight on each instance): the instances'
    read-modify-writes are serialised by the store itself, not by a lock of one process."""
    gate = Gate(expected=CHATS)
    fake_llm.responder = _turns_writing_memory(gate)
    first, second = _two_instances(tmp_path, fake_llm, postgres_dsn)
    async with gateway_on(first) as a, gateway_on(second) as b:
        handles = [await (a, b)[c % 2].submit(msg(_fact(c, 0), chat=f"chat{c}")) for c in range(CHATS)]
        await gate.all_arrived.wait()
        gate.release.set()  # the sixteen write_memory calls come back at once, on both instances
        finals = [await handle.result() for handle in handles]
        assert [getattr(f, "full_text", None) for f in finals] == ["saved"] * CHATS
        memory = await b.memory_files.read(b.memory_files.memory_name(b.agents.get("default")))
        assert sorted(memory.splitlines()) == sorted(_fact(c, 0) for c in range(CHATS))
        assert memory_files_below([first, second]) == []  # nothing of memory in either data directory


async def test_an_l3_run_on_one_instance_and_write_memory_on_the_other_at_once_both_survive(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    gate = Gate(expected=3)  # a's L3 rewrite of MEMORY.md and USER.md, b's write_memory call
    fake_llm.responder = _turns_writing_memory(gate)
    first, second = _two_instances(tmp_path, fake_llm, postgres_dsn)
    async with gateway_on(first) as a, gateway_on(second) as b:
        agent = a.agents.get("default")
        name = a.memory_files.memory_name(agent)
        await a.memory_files.writer.update(name, lambda text: "- an old fact\n")
        await seed(a, a.resolve_key(msg("x", chat="l3"))[1], 2)
        l3 = asyncio.create_task(a.timers[L3_TIMER].tick_now())
        handle = await b.submit(msg(_fact(1, 1), chat="chat1"))
        await gate.all_arrived.wait()  # L3 read the file before its call; the tool reads it when its answer is back
        gate.release.set()
        final = await handle.result()
        await l3
        assert getattr(final, "full_text", None) == "saved"
        memory = await b.memory_files.read(name)
        assert "- an old fact" in memory and L3_LINE in memory and _fact(1, 1) in memory
        assert a.timers[L3_TIMER].failures == 0


def memory_files_below(instances: list[Settings]) -> list[Path]:
    """Every memory file (design §4) in the instances' data and auth directories."""
    roots = [root for s in instances for root in (s.data_dir, s.auth_dir)]
    patterns = ("*.md", "*.md.bak", ".l3_state.json")
    return [path for root in roots for pattern in patterns for path in root.rglob(pattern)]
