"""Private by default in groups: under memory scope "auto", three people (a private chat each and one group on
Feishu) plant facts through messages, write_memory calls and L3 runs; every prompt the fake model received is
checked for facts from a chat it must not see."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agenthub.agent.definition import AgentConfig, AgentDefinition
from agenthub.config import Settings
from agenthub.forget.redact import Person
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_services, gateway_forgetter
from agenthub.memory.files import memory_scope
from agenthub.memory.wiring import L3_TIMER
from agenthub.messages import InboundMessage
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, reply_text, reply_tool
from tests.support.memory import chat_memory_file, echo_l3, gateway_on, is_l3_request, l3_material, system_text

PEOPLE = ("alice", "bob", "carol")
GROUP = "oc_team_group"
OTHER_GROUP = "oc_other_group"
GROUPS = (GROUP, OTHER_GROUP)
PROFILE_HEADING = "# About the user (USER.md)"


def private_fact(person: str, how: str) -> str:
    return f"{person.upper()}-PRIVATE-{how}"


def group_fact(person: str, how: str) -> str:
    return f"{person.upper()}-GROUP-{how}"


ALL_PRIVATE = [private_fact(p, how) for p in PEOPLE for how in ("SAID", "TOOL")]
ALL_GROUP = [group_fact(p, how) for p in PEOPLE for how in ("SAID", "TOOL")]


@dataclass
class Turn:
    chat: str
    sender: str
    requests: list[RecordedRequest]

    @property
    def in_group(self) -> bool:
        return self.chat in GROUPS


def message(chat: str, sender: str, text: str, *, channel: str = "feishu") -> InboundMessage:
    chat_type = "group" if chat in GROUPS else "private"
    return InboundMessage(channel, chat, sender, text, metadata={"chat_type": chat_type})


async def say(
    gw: GatewayCore, fake: FakeAnthropic, chat: str, sender: str, text: str, *, channel: str = "feishu"
) -> Turn:
    before = len(fake.message_requests())
    await (await gw.submit(message(chat, sender, text, channel=channel))).result()
    return Turn(chat, sender, fake.message_requests()[before:])


def profile_section(body: dict[str, Any]) -> str:
    system = system_text(body)
    return system[system.index(PROFILE_HEADING) :] if PROFILE_HEADING in system else ""


def assert_no_leak(turn: Turn) -> None:
    """A private chat sees only its owner's private facts; a group sees group facts (its transcript and memory)
    and, as the profile, only the current sender's group profile."""
    for request in turn.requests:
        body = request.body or {}
        assert not is_l3_request(body)
        seen = str(body)
        if turn.in_group:
            forbidden = ALL_PRIVATE
        else:
            forbidden = [f for f in ALL_PRIVATE + ALL_GROUP if not f.startswith(f"{turn.sender.upper()}-PRIVATE")]
        leaked = [fact for fact in forbidden if fact in seen]
        assert leaked == [], f"{turn.sender} in {turn.chat} saw {leaked}"
        if turn.in_group:
            others = [group_fact(p, "SAID") for p in PEOPLE if p != turn.sender]
            profile = profile_section(body)
            assert [fact for fact in others if fact in profile] == []


async def plant(gw: GatewayCore, fake: FakeAnthropic, channel: str = "feishu") -> list[Turn]:
    """Each person: a fact said and one saved with write_memory, in their private chat and in the group."""
    turns = []
    for person in PEOPLE:
        private = f"oc_private_{person}"
        turns.append(await say(gw, fake, private, person, f"remember {private_fact(person, 'SAID')}", channel=channel))
        fake.script(reply_tool("write_memory", {"content": private_fact(person, "TOOL")}), reply_text("saved"))
        turns.append(await say(gw, fake, private, person, "please save that", channel=channel))
        turns.append(await say(gw, fake, GROUP, person, f"team, note {group_fact(person, 'SAID')}", channel=channel))
        fake.script(reply_tool("write_memory", {"content": group_fact(person, "TOOL")}), reply_text("saved"))
        turns.append(await say(gw, fake, GROUP, person, "save it for the team", channel=channel))
    return turns


async def ask_everywhere(gw: GatewayCore, fake: FakeAnthropic, channel: str = "feishu") -> list[Turn]:
    turns = []
    for person in PEOPLE:
        turns.append(await say(gw, fake, f"oc_private_{person}", person, "what do you know about me?", channel=channel))
        turns.append(await say(gw, fake, GROUP, person, "what do you know about me?", channel=channel))
    return turns


def memory_files_on_disk(settings: Settings) -> list[Path]:
    """Every memory file (design §4) below the data and auth directories."""
    patterns = ("*.md", "*.md.bak", ".l3_state.json")
    return [path for root in (settings.data_dir, settings.auth_dir) for p in patterns for path in root.rglob(p)]


@pytest.mark.parametrize("channel", ["feishu", "wecom"])
async def test_privacy_matrix_three_people_private_chats_and_a_group(
    backend_settings: Settings, fake_llm: FakeAnthropic, channel: str
) -> None:
    settings = backend_settings
    fake_llm.responder = echo_l3
    async with gateway_on(settings) as gw:
        turns = await plant(gw, fake_llm, channel)
        await gw.timers[L3_TIMER].tick_now()
        turns += await ask_everywhere(gw, fake_llm, channel)
        await gw.timers[L3_TIMER].tick_now()  # a second run merges the profiles the first one wrote
        turns += await ask_everywhere(gw, fake_llm, channel)

        for turn in turns:
            assert_no_leak(turn)
        l3 = [r.body or {} for r in fake_llm.message_requests() if is_l3_request(r.body or {})]
        assert len(l3) >= 20  # two runs: 6 profiles and 4 chat memories each
        for body in l3:  # the current file and the new material together
            assert_one_file_s_own_material(body, str(body["messages"]))
        for turn in turns[-6:]:  # after L3, each chat sees its own person's profile
            body = turn.requests[-1].body or {}
            own = group_fact(turn.sender, "SAID") if turn.in_group else private_fact(turn.sender, "SAID")
            assert own in profile_section(body), f"{turn.sender} in {turn.chat} misses their profile"
            if turn.in_group:  # and the group's own memory, fed by every member
                assert all(group_fact(p, "TOOL") in system_text(body) for p in PEOPLE)
            else:
                assert private_fact(turn.sender, "TOOL") in system_text(body)

        files = gw.memory_files
        agent, group_key = gw.resolve_key(message(GROUP, "x", "hi", channel=channel))
        assert await files.read(files.shared_profile) == ""  # the shared profile takes nothing from Feishu
        assert await files.read(files.memory_name(agent)) == ""
        group_files = [files.memory_name(agent, group_key)]
        group_files += [files.person_profile(agent, group_key, p, "group") for p in PEOPLE]
        for name in group_files:
            text = await files.read(name)
            assert text and [fact for fact in ALL_PRIVATE if fact in text] == [], name
        on_disk = memory_files_on_disk(settings)
        assert bool(on_disk) is (settings.store.backend == "files"), on_disk  # postgres: nothing in the data dir


async def test_l3_requests_feed_each_file_only_from_its_own_chats(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = echo_l3
    async with build_services(settings_factory()) as services:
        gw = services.gateway
        await plant(gw, fake_llm)
        before = len(fake_llm.message_requests())
        await gw.timers[L3_TIMER].tick_now()
        l3 = [r.body or {} for r in fake_llm.message_requests()[before:]]
        profiles = [b for b in l3 if "You maintain USER.md" in system_text(b)]
        memories = [b for b in l3 if "You maintain MEMORY.md" in system_text(b)]
        assert len(profiles) == 6 and len(memories) == 4  # 3 people × 2 visibilities; 3 private chats + 1 group
        for body in profiles + memories:
            assert_one_file_s_own_material(body, l3_material(body))
            assert l3_material(body), "every file here has new material"


def assert_one_file_s_own_material(body: dict[str, Any], text: str) -> None:
    """An L3 or flush request's `text` never mixes private and group facts; a profile's and a private chat's are
    one person's own."""
    owners = {fact.split("-")[0] for fact in ALL_PRIVATE + ALL_GROUP if fact in text}
    kinds = {"PRIVATE" if "-PRIVATE-" in f else "GROUP" for f in ALL_PRIVATE + ALL_GROUP if f in text}
    assert len(kinds) <= 1, text  # never private and group material in one file
    if "You maintain USER.md" in system_text(body) or kinds == {"PRIVATE"}:
        assert len(owners) <= 1, text  # one person's own material


@pytest.mark.parametrize("profile", ["per_user", "auto"])
async def test_a_person_s_private_profile_never_reaches_the_group_or_another_person(
    backend_settings: Settings, fake_llm: FakeAnthropic, profile: str
) -> None:
    """Explicit `per_user` on a multi-user channel also keeps a profile per (person, visibility); Bob's private
    chat never sees Alice's profile."""
    settings = backend_settings
    write_agent(settings.agents_dir, "default", {"memory": {"user_profile": profile}})
    fake_llm.responder = echo_l3
    async with gateway_on(settings) as gw:
        await say(gw, fake_llm, "oc_private_alice", "alice", f"my secret {private_fact('alice', 'SAID')}")
        await gw.timers[L3_TIMER].tick_now()
        agent, key = gw.resolve_key(message("oc_private_alice", "alice", "hi"))
        private_profile = gw.memory_files.person_profile(agent, key, "alice", "private")
        assert private_fact("alice", "SAID") in await gw.memory_files.read(private_profile)
        turn = await say(gw, fake_llm, GROUP, "alice", "hello team")
        assert private_fact("alice", "SAID") not in str(turn.requests[0].body)
        turn = await say(gw, fake_llm, "oc_private_bob", "bob", "what do you know about me?")
        assert turn.requests and private_fact("alice", "SAID") not in str(turn.requests[0].body)
        own = await say(gw, fake_llm, "oc_private_alice", "alice", "and about me?")
        assert private_fact("alice", "SAID") in profile_section(own.requests[0].body or {})  # it is there to leak


async def test_compaction_flush_writes_the_group_s_own_memory(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(memory={"keep_recent": 2})
    fake_llm.responder = echo_l3
    async with build_services(settings) as services:
        gw = services.gateway
        for i in range(3):
            await say(gw, fake_llm, GROUP, "bob", f"fact {group_fact('bob', 'SAID')} {i}")
        await say(gw, fake_llm, GROUP, "bob", "/compact")
        agent, key = gw.resolve_key(message(GROUP, "bob", "hi"))
        group_memory = chat_memory_file(gw, agent, key)
        assert group_memory != gw.history.layout("default").memory_file
        assert group_fact("bob", "SAID") in group_memory.read_text(encoding="utf-8")
        assert not gw.history.layout("default").memory_file.exists()


@pytest.mark.parametrize(("channel", "injected"), [("feishu", False), ("wecom", False), ("cli", True), ("http", True)])
async def test_existing_shared_files_only_reach_single_user_channels(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, channel: str, injected: bool
) -> None:
    """Upgrade: an agent-wide MEMORY.md and auth/USER.md from before stay on disk, injected only into CLI/HTTP."""
    settings = settings_factory()
    async with build_services(settings) as services:
        gw = services.gateway
        memory_file = gw.history.layout("default").memory_file
        memory_file.parent.mkdir(parents=True, exist_ok=True)
        memory_file.write_text("- LEGACY-AGENT-MEMORY\n", encoding="utf-8")
        settings.auth_dir.mkdir(parents=True, exist_ok=True)
        (settings.auth_dir / "USER.md").write_text("- LEGACY-SHARED-PROFILE\n", encoding="utf-8")
        for chat_type in ("private", "group"):
            msg = InboundMessage(channel, f"chat_{chat_type}", "alice", "hi", metadata={"chat_type": chat_type})
            await (await gw.submit(msg)).result()
            system = system_text(fake_llm.message_requests()[-1].body or {})
            assert ("LEGACY-AGENT-MEMORY" in system) is injected
            assert ("LEGACY-SHARED-PROFILE" in system) is injected
        assert memory_file.is_file() and (settings.auth_dir / "USER.md").is_file()


async def test_a_message_without_chat_type_is_treated_as_a_group(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    """The safe side: no chat_type in the metadata shows the sender's group profile, never the private one."""
    fake_llm.responder = echo_l3
    async with build_services(settings_factory()) as services:
        gw = services.gateway
        await say(gw, fake_llm, "oc_private_alice", "alice", f"secret {private_fact('alice', 'SAID')}")
        await gw.timers[L3_TIMER].tick_now()
        before = len(fake_llm.message_requests())
        await (await gw.submit(InboundMessage("feishu", "oc_unknown", "alice", "hi"))).result()
        assert private_fact("alice", "SAID") not in str(fake_llm.message_requests()[before].body)


@pytest.mark.parametrize(
    ("options", "channel", "chat_type", "expected"),
    [
        ({}, "wecom", "private", ("chat", "per_user", "private")),
        ({}, "feishu", "group", ("chat", "per_user", "group")),
        ({}, "feishu", None, ("chat", "per_user", "group")),
        ({}, "cli", "private", ("agent", "shared", "private")),
        ({}, "http", None, ("agent", "shared", "private")),
        ({"scope": "agent", "user_profile": "shared"}, "wecom", "group", ("agent", "shared", "group")),
        ({"scope": "chat"}, "cli", "private", ("chat", "shared", "private")),
        ({"user_profile": "per_user"}, "http", "private", ("agent", "per_user", "private")),
    ],
)
def test_scope_rule_auto_by_channel_and_explicit_settings_win(
    options: dict[str, str], channel: str, chat_type: str | None, expected: tuple[str, str, str]
) -> None:
    agent = AgentDefinition("default", AgentConfig.model_validate({"memory": options}), "persona")
    scope = memory_scope(agent, channel, chat_type)
    assert (scope.memory, scope.profile, scope.visibility) == expected


async def test_a_fact_from_one_group_never_reaches_another_group_through_a_member_s_profile(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    """G1: alice and bob; G2: alice and carol. The bot's reply to alice in G1 repeats bob's fact, so L3 feeds it to
    alice's profile in G1: in G2, alice's profile is another file and carries nothing of G1."""
    fake_llm.responder = echo_l3
    async with build_services(settings_factory()) as services:
        gw = services.gateway
        await say(gw, fake_llm, GROUP, "bob", f"team, note {group_fact('bob', 'SAID')}")
        fake_llm.script(reply_text(f"Bob said {group_fact('bob', 'SAID')}"))
        await say(gw, fake_llm, GROUP, "alice", "what did bob say?")
        await say(gw, fake_llm, OTHER_GROUP, "carol", f"hi {group_fact('carol', 'SAID')}")
        await say(gw, fake_llm, OTHER_GROUP, "alice", f"hello {group_fact('alice', 'SAID')}")
        await gw.timers[L3_TIMER].tick_now()
        in_g1 = await say(gw, fake_llm, GROUP, "alice", "what do you know about me?")
        in_g2 = await say(gw, fake_llm, OTHER_GROUP, "alice", "what do you know about me?")
        assert group_fact("bob", "SAID") in profile_section(in_g1.requests[-1].body or {})
        assert group_fact("alice", "SAID") in profile_section(in_g2.requests[-1].body or {})
        assert group_fact("bob", "SAID") not in str(in_g2.requests[-1].body)


async def test_profiles_are_per_channel_a_same_named_sender_elsewhere_is_another_person(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    """WeCom `zhangsan` and Feishu `zhangsan` are two people: each sees only their own profile, and forgetting
    one leaves the other's."""
    fake_llm.responder = echo_l3
    async with build_services(settings_factory()) as services:
        gw = services.gateway
        await say(gw, fake_llm, "zhangsan", "zhangsan", f"remember {private_fact('wecom', 'SAID')}", channel="wecom")
        await gw.timers[L3_TIMER].tick_now()
        feishu = await say(gw, fake_llm, "zhangsan", "zhangsan", "what do you know about me?", channel="feishu")
        assert private_fact("wecom", "SAID") not in str(feishu.requests[-1].body)
        await gateway_forgetter(services).forget_everywhere(
            [gw.agents.get("default")], Person("feishu", "zhangsan"), actor="t"
        )
        wecom = await say(gw, fake_llm, "zhangsan", "zhangsan", "what do you know about me?", channel="wecom")
        assert private_fact("wecom", "SAID") in profile_section(wecom.requests[-1].body or {})
