"""L3 MemoryProcessor: scripted rewrites of MEMORY.md and USER.md, failure safety, caps, privacy scopes, injection."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from typing import Any

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.memory.wiring import L3_TIMER
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, hang, http_error, reply_text
from tests.support.memory import chat_memory_file, is_l3_request, msg, seed, system_text

LONG = "长" * 150 + "x" * 350  # 500 characters


def _material(body: dict[str, Any]) -> str:
    text = str(body["messages"][0]["content"])
    found = re.search(r"<recent-conversations>\n(.*)\n</recent-conversations>", text, re.S)
    return found.group(1) if found else ""


def scripted_l3(delay: float = 0.0, fail_user: bool = False) -> Callable[[dict[str, Any]], ScriptedReply | None]:
    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        system = system_text(body)
        if "You maintain USER.md" in system:
            if fail_user:
                return http_error(400, "bad request")
            return reply_text("# User\n- prefers tea", first_byte_delay_s=delay)
        found = re.search(r"the assistant agent '([^']+)'", system)
        if found:
            return reply_text(f"# Memory of {found.group(1)}\n- knows things", first_byte_delay_s=delay)
        return None

    return respond


async def test_tick_rewrites_each_agents_memory_and_one_user_profile_concurrently(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    for name in ("alpha", "beta"):
        write_agent(settings.agents_dir, name)
    fake_llm.responder = scripted_l3(delay=0.3)
    async with build_gateway(settings) as gw:
        for agent in ("alpha", "beta"):
            key = gw.resolve_key(msg("x", agent=agent))[1]
            await seed(gw, key, 3)
            await gw.history.append(key, {"role": "user", "content": LONG})
        await gw.timers[L3_TIMER].tick_now()

        for agent in ("alpha", "beta"):
            path = gw.history.layout(agent).memory_file
            assert path.read_text(encoding="utf-8") == f"# Memory of {agent}\n- knows things\n"
        assert (settings.auth_dir / "USER.md").read_text(encoding="utf-8") == "# User\n- prefers tea\n"
        requests = fake_llm.message_requests()
        assert len(requests) == 3 and all(is_l3_request(r.body or {}) for r in requests)
        assert fake_llm.max_in_flight == 3  # the memory calls and the USER.md call ran at the same time
        user_call = next(r.body or {} for r in requests if "USER.md" in system_text(r.body or {}))
        assert "question 0" in _material(user_call) and "## chat cli/c1" in _material(user_call)
        clipped = re.search(r"user: (长+x*…?)", _material(user_call))
        assert clipped is not None and len(clipped.group(1)) == 200

        await gw.timers[L3_TIMER].tick_now()  # nothing changed since: no calls
        assert len(fake_llm.message_requests()) == 3


async def test_input_is_the_ten_newest_sessions_and_their_last_thirty_messages(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = scripted_l3()
    async with build_gateway(settings_factory()) as gw:
        now = time.time()
        for i in range(12):
            key = gw.resolve_key(msg("x", chat=f"chat{i:02d}"))[1]
            await seed(gw, key, 20)
            stamp = now - 1000 + i * 10  # chat00 is the oldest
            os.utime(gw.history.layout("default").history_file(key), (stamp, stamp))
        await gw.timers[L3_TIMER].tick_now()
        body = next(r.body or {} for r in fake_llm.message_requests() if "MEMORY.md" in system_text(r.body or {}))
        material = _material(body)
        chats = re.findall(r"## chat cli/(chat\d\d)", material)
        assert sorted(chats) == [f"chat{i:02d}" for i in range(2, 12)]
        first_section = material.split("## chat")[1]
        assert len(first_section.strip().splitlines()) == 1 + 30
        assert "question 5\n" in first_section and "answer 4\n" not in first_section


def _l3_calls(fake: FakeAnthropic, since: int) -> list[str]:
    """Which file each L3 request since request `since` rewrote: an agent's name, or "USER.md"."""
    calls = []
    for request in fake.message_requests()[since:]:
        system = system_text(request.body or {})
        found = re.search(r"the assistant agent '([^']+)'", system)
        calls.append(found.group(1) if found else "USER.md" if "You maintain USER.md" in system else "other")
    return sorted(calls)


async def test_a_failing_user_profile_call_leaves_only_that_file_and_only_it_is_retried(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    fake_llm.responder = scripted_l3(fail_user=True)
    async with build_gateway(settings) as gw:
        memory_file = gw.history.layout("default").memory_file
        memory_file.parent.mkdir(parents=True)
        memory_file.write_text("old memory\n", encoding="utf-8")
        (settings.auth_dir).mkdir(parents=True, exist_ok=True)
        (settings.auth_dir / "USER.md").write_text("old profile\n", encoding="utf-8")
        await seed(gw, gw.resolve_key(msg("x"))[1], 2)
        timer = gw.timers[L3_TIMER]
        await timer.tick_now()
        assert memory_file.read_text(encoding="utf-8") == "# Memory of default\n- knows things\n"
        assert (settings.auth_dir / "USER.md").read_text(encoding="utf-8") == "old profile\n"
        assert timer.failures == 0  # handled inside the run, logged
        fake_llm.responder = scripted_l3()
        before = len(fake_llm.message_requests())
        await timer.tick_now()  # nothing new was said: only the failed file's material is offered again
        assert _l3_calls(fake_llm, before) == ["USER.md"]
        assert (settings.auth_dir / "USER.md").read_text(encoding="utf-8") == "# User\n- prefers tea\n"
        before = len(fake_llm.message_requests())
        await timer.tick_now()
        assert _l3_calls(fake_llm, before) == []


async def test_one_agents_failing_model_keeps_only_its_own_memory_file_from_being_written(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    names = ("alpha", "beta", "gamma")
    for name in names:
        write_agent(settings.agents_dir, name)
    working = scripted_l3()

    def beta_unauthorised(body: dict[str, Any]) -> ScriptedReply | None:
        if "the assistant agent 'beta'" in system_text(body):
            return http_error(401, "invalid x-api-key")
        return working(body)

    fake_llm.responder = beta_unauthorised
    async with build_gateway(settings) as gw:
        beta_file = gw.history.layout("beta").memory_file
        beta_file.parent.mkdir(parents=True)
        beta_file.write_text("old beta memory\n", encoding="utf-8")
        for name in names:
            await seed(gw, gw.resolve_key(msg("x", agent=name))[1], 2)
        timer = gw.timers[L3_TIMER]
        await timer.tick_now()
        for name in ("alpha", "gamma"):
            assert (
                gw.history.layout(name).memory_file.read_text(encoding="utf-8")
                == f"# Memory of {name}\n- knows things\n"
            )
        assert (settings.auth_dir / "USER.md").read_text(encoding="utf-8") == "# User\n- prefers tea\n"
        assert beta_file.read_text(encoding="utf-8") == "old beta memory\n"

        fake_llm.responder = working  # beta's key is fixed; nobody said anything new
        before = len(fake_llm.message_requests())
        await timer.tick_now()
        assert _l3_calls(fake_llm, before) == ["beta"]
        assert beta_file.read_text(encoding="utf-8") == "# Memory of beta\n- knows things\n"
        before = len(fake_llm.message_requests())
        await timer.tick_now()
        assert _l3_calls(fake_llm, before) == []


async def test_a_hung_l3_call_ends_at_the_background_timeout_and_the_other_files_are_written(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    # the model's own read timeout is far longer: only the background bound can end the hung call in time
    settings = settings_factory(memory={"background_timeout_s": 0.5}, llm={"timeout_s": 60.0})
    for name in ("alpha", "beta"):
        write_agent(settings.agents_dir, name)
    working = scripted_l3()

    def beta_hangs(body: dict[str, Any]) -> ScriptedReply | None:
        return hang() if "the assistant agent 'beta'" in system_text(body) else working(body)

    fake_llm.responder = beta_hangs
    async with build_gateway(settings) as gw:
        for name in ("alpha", "beta"):
            await seed(gw, gw.resolve_key(msg("x", agent=name))[1], 2)
        async with asyncio.timeout(20):  # a guard against hanging, not a timing assertion
            await gw.timers[L3_TIMER].tick_now()
        alpha = gw.history.layout("alpha").memory_file.read_text(encoding="utf-8")
        assert alpha == "# Memory of alpha\n- knows things\n"
        assert not gw.history.layout("beta").memory_file.exists()
        hung = [r for r in fake_llm.requests if "the assistant agent 'beta'" in system_text(r.body or {})]
        assert hung and all(r.disconnected.is_set() for r in hung)  # the call was abandoned, not left running


async def test_files_are_capped_keeping_the_top(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(memory={"memory_max_chars": 1000, "user_max_chars": 500})
    huge = "\n".join(f"- fact {i:04d} " + "y" * 40 for i in range(200))
    fake_llm.responder = lambda body: reply_text(huge) if is_l3_request(body) else None
    async with build_gateway(settings) as gw:
        await seed(gw, gw.resolve_key(msg("x"))[1], 2)
        await gw.timers[L3_TIMER].tick_now()
        memory = gw.history.layout("default").memory_file.read_text(encoding="utf-8")
        profile = (settings.auth_dir / "USER.md").read_text(encoding="utf-8")
        assert len(memory) <= 1000 and memory.startswith("- fact 0000") and "fact 0199" not in memory
        assert len(profile) <= 500 and profile.startswith("- fact 0000")


def _echo(body: dict[str, Any]) -> ScriptedReply | None:
    """L3 answers that copy the conversations into the file, so any leak would show."""
    return reply_text("# notes\n" + _material(body)) if is_l3_request(body) else None


async def test_chat_scope_keeps_one_chats_facts_out_of_another_chats_request(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    write_agent(settings.agents_dir, "default", {"memory": {"scope": "chat", "user_profile": "per_user"}})
    fake_llm.responder = _echo
    async with build_gateway(settings) as gw:
        await (await gw.submit(msg("my locker code is 4711", chat="room1", sender="alice"))).result()
        await (await gw.submit(msg("I enjoy hiking", chat="room2", sender="bob"))).result()
        await gw.timers[L3_TIMER].tick_now()
        chats = gw.history.layout("default").memory_dir / "chats"
        assert sorted(p.name for p in chats.iterdir()) == ["default_cli_room1.md", "default_cli_room2.md"]
        assert not gw.history.layout("default").memory_file.exists()
        assert not (settings.auth_dir / "USER.md").exists()
        users = sorted((settings.auth_dir / "users").iterdir())
        assert len(users) == 2 and sum("4711" in p.read_text(encoding="utf-8") for p in users) == 1

        before = len(fake_llm.message_requests())
        await (await gw.submit(msg("what do you know?", chat="room2", sender="bob"))).result()
        await (await gw.submit(msg("and here?", chat="room1", sender="alice"))).result()
        room2, room1 = (r.body or {} for r in fake_llm.message_requests()[before:])
        assert "hiking" in system_text(room2) and "4711" not in str(room2)
        assert "4711" in system_text(room1) and "hiking" not in str(room1)


async def test_memory_files_are_injected_and_cut_to_budget(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(memory={"memory_budget_tokens": 100, "user_budget_tokens": 100})
    async with build_gateway(settings) as gw:
        memory_file = gw.history.layout("default").memory_file
        memory_file.parent.mkdir(parents=True)
        memory_file.write_text("\n".join(f"记忆第{i}条：项目代号{i}" for i in range(100)), encoding="utf-8")
        settings.auth_dir.mkdir(parents=True, exist_ok=True)
        (settings.auth_dir / "USER.md").write_text("- 名字：张三\n- 喜欢简短回答\n", encoding="utf-8")
        await (await gw.submit(msg("hi"))).result()
        system = system_text(fake_llm.message_requests()[-1].body or {})
        assert "记忆第0条" in system and "记忆第99条" not in system and "cut to fit" in system
        assert "- 名字：张三\n- 喜欢简短回答" in system
        assert system.index("记忆第0条") < system.index("名字：张三")


async def test_a_file_whose_write_fails_is_retried_alone_and_the_other_files_are_written(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    names = ("alpha", "beta", "gamma")
    for name in names:
        write_agent(settings.agents_dir, name)
    fake_llm.responder = scripted_l3()
    async with build_gateway(settings) as gw:
        alpha_file = gw.history.layout("alpha").memory_file
        alpha_file.parent.mkdir(parents=True)
        alpha_file.write_text("old alpha memory\n", encoding="utf-8")
        blocker = alpha_file.with_name(alpha_file.name + ".bak")  # its backup cannot be replaced: the write raises
        (blocker / "in-the-way").mkdir(parents=True)
        for name in names:
            await seed(gw, gw.resolve_key(msg("x", agent=name))[1], 2)
        timer = gw.timers[L3_TIMER]
        await timer.tick_now()
        assert timer.failures == 0  # handled inside the run, logged
        for name in ("beta", "gamma"):
            written = gw.history.layout(name).memory_file.read_text(encoding="utf-8")
            assert written == f"# Memory of {name}\n- knows things\n"
        assert (settings.auth_dir / "USER.md").read_text(encoding="utf-8") == "# User\n- prefers tea\n"
        assert alpha_file.read_text(encoding="utf-8") == "old alpha memory\n"

        (blocker / "in-the-way").rmdir()
        blocker.rmdir()
        before = len(fake_llm.message_requests())
        await timer.tick_now()  # nothing new was said: only the file that failed is offered its material again
        assert _l3_calls(fake_llm, before) == ["alpha"]
        assert alpha_file.read_text(encoding="utf-8") == "# Memory of alpha\n- knows things\n"


async def test_a_planted_link_at_one_agents_memory_file_stops_only_that_file(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, tmp_path: Any
) -> None:
    settings = settings_factory()
    for name in ("alpha", "beta"):
        write_agent(settings.agents_dir, name)
    fake_llm.responder = scripted_l3()
    outside = tmp_path / "outside.md"
    async with build_gateway(settings) as gw:
        for name in ("alpha", "beta"):
            await seed(gw, gw.resolve_key(msg("x", agent=name))[1], 2)
        alpha_file = gw.history.layout("alpha").memory_file
        alpha_file.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(outside, alpha_file)
        timer = gw.timers[L3_TIMER]
        await timer.tick_now()
        assert timer.failures == 0
        assert gw.history.layout("beta").memory_file.read_text(encoding="utf-8") == "# Memory of beta\n- knows things\n"
        assert (settings.auth_dir / "USER.md").read_text(encoding="utf-8") == "# User\n- prefers tea\n"
        assert not outside.exists() and alpha_file.is_symlink()


async def test_a_planted_link_at_one_chats_own_memory_file_stops_only_that_chat(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, tmp_path: Any
) -> None:
    settings = settings_factory()
    write_agent(settings.agents_dir, "default", {"memory": {"scope": "chat"}})
    fake_llm.responder = scripted_l3()
    async with build_gateway(settings) as gw:
        agent = gw.agents.get("default")
        planted, kept = gw.resolve_key(msg("x", chat="planted"))[1], gw.resolve_key(msg("x", chat="kept"))[1]
        for key in (planted, kept):
            await seed(gw, key, 2)
        planted_file = chat_memory_file(gw, agent, planted)
        planted_file.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(tmp_path / "outside.md", planted_file)
        await gw.timers[L3_TIMER].tick_now()
        kept_file = chat_memory_file(gw, agent, kept)
        assert kept_file.read_text(encoding="utf-8") == "# Memory of default\n- knows things\n"
        assert not (tmp_path / "outside.md").exists()
