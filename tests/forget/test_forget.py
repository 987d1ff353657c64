"""`/forget` (design §14): the sender's messages in this chat, the replies to them, summaries, profile, memory lines
and the search index, double-confirmed; everyone else's records stay byte-identical."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from agenthub import i18n
from agenthub.agent.large_results import LargeResultStore
from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.forget.redact import Markers, Person, redact
from agenthub.forget.scrub import QuoteMatcher
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import Services, build_services, gateway_forgetter
from agenthub.media.names import chat_folders, inbox_dir
from agenthub.memory.wiring import L3_TIMER
from agenthub.messages import Attachment, DoneEvent, InboundMessage
from agenthub.scheduler.jobs import Job
from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.search_index import SearchScope
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.forget import PRIVATE_CONFIG, files_with, lines_of, others_exchanges
from tests.support.media import png
from tests.support.memory import (
    backup_of,
    chat_memory_file,
    echo_l3,
    is_l3_request,
    memory_file,
    services_on,
)

GROUP = SessionKey("default", "wecom", "team")
ALICE_SAYS = [
    "My locker code is 4417-ZEBRA, please remember it",
    "另外我对榛子过敏很严重，订餐时注意",
]
FACTS = ["4417-ZEBRA", "榛子过敏"]
BOB_SAYS = ["Bob prefers the blue team jersey", "Bob asks when the next offsite is"]


GROUP_META = {"chat_type": "group"}


def msg(sender: str, text: str, chat: str = "team") -> InboundMessage:
    return InboundMessage("wecom", chat, sender, text, metadata=GROUP_META)


async def say(gw: GatewayCore, sender: str, text: str, chat: str = "team") -> str:
    final = await (await gw.submit(msg(sender, text, chat))).result()
    assert isinstance(final, DoneEvent), final
    return final.full_text


@pytest_asyncio.fixture
async def team_services(settings: Settings) -> AsyncIterator[tuple[Services, ManualClock]]:
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    clock = ManualClock()
    async with build_services(settings, clock=clock) as services:
        yield services, clock


@pytest.fixture
def team(team_services: tuple[Services, ManualClock]) -> tuple[GatewayCore, ManualClock]:
    services, clock = team_services
    return services.gateway, clock


async def plant_group_history(gw: GatewayCore, fake_llm: FakeAnthropic) -> None:
    """Alice and Bob in one group; Alice's first turn stores her fact with write_memory; then a compaction
    summary that quotes her, with the older messages in the archive."""
    fake_llm.script(
        reply_tool("write_memory", {"content": "- Alice: locker code is 4417-ZEBRA"}, tool_id="tu_1"),
        reply_text("Saved: your locker code is 4417-ZEBRA."),
    )
    await say(gw, "alice", ALICE_SAYS[0])
    await say(gw, "bob", BOB_SAYS[0])
    await say(gw, "alice", ALICE_SAYS[1])
    await say(gw, "bob", BOB_SAYS[1])
    history = await gw.history.load(GROUP)
    summary = {
        "role": "system",
        "content": "[历史摘要]\nAlice's locker code is 4417-ZEBRA; Bob prefers blue.",
        "timestamp": 1,
        "kind": "summary",
    }
    await gw.history.replace(GROUP, [summary, *history[-4:]])  # as a compaction does: archive first


def plant_memory(gw: GatewayCore) -> dict[str, Path]:
    """What L3 would have written: Alice's profile (and its backup), lines quoting her in the shared files."""
    agent = gw.agents.get("default")
    files = gw.memory_files
    profile = memory_file(gw, files.person_profile(agent, GROUP, "alice", "private"))
    bob_profile = memory_file(gw, files.person_profile(agent, GROUP, "bob", "private"))
    agent_memory = gw.settings.data_dir / "default" / "memory" / "MEMORY.md"
    shared_user = gw.settings.auth_dir / "USER.md"
    for path, text in [
        (profile, "- locker code is 4417-ZEBRA\n"),
        (backup_of(profile), "- 对榛子过敏很严重\n"),
        (bob_profile, "- Bob prefers the blue team jersey\n"),
        (agent_memory, "# Team\n- someone said: my locker code is 4417-ZEBRA, please\n- Bob prefers blue jerseys\n"),
        (shared_user, "- 有人说我对榛子过敏很严重\n- the team meets on Mondays\n"),
    ]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return {"profile": profile, "bob_profile": bob_profile, "memory": agent_memory, "user": shared_user}


async def test_forget_in_a_group_redacts_only_the_sender_and_keeps_everyone_else_byte_identical(
    team: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, _ = team
    await plant_group_history(gw, fake_llm)
    planted = plant_memory(gw)
    layout = gw.history.layout("default")
    history_file, archive_file = layout.history_file(GROUP), layout.archive_file(GROUP)
    assert files_with([gw.settings.data_dir, gw.settings.auth_dir], FACTS[0]), "the test must plant the fact"
    bob_before = {p: others_exchanges(lines_of(p), "alice") for p in (history_file, archive_file)}
    assert all(bob_before.values())
    roles_before = [json.loads(x)["role"] for x in lines_of(archive_file) + lines_of(history_file)]

    prompt = await say(gw, "alice", "/forget")
    assert "/forget" in prompt and "30" in prompt  # zh-CN on WeCom: asks first, nothing done yet
    assert files_with([gw.settings.data_dir], FACTS[0])
    assert "30" in await say(gw, "bob", "/forget")  # another member's /forget does not confirm Alice's
    with capture_logs() as logs:
        done = await say(gw, "alice", "/forget")
    assert "已完成" in done

    for fact in FACTS:
        assert files_with([gw.settings.data_dir, gw.settings.auth_dir], fact) == [], fact
    for path, lines in bob_before.items():
        assert others_exchanges(lines_of(path), "alice") == lines, path
    roles_after = [json.loads(x)["role"] for x in lines_of(archive_file) + lines_of(history_file)]
    assert roles_after == [r for r in roles_before if r != "system"]  # turn structure kept, the summary dropped
    archived = [json.loads(x) for x in lines_of(archive_file)]
    uses = [
        b["id"] for m in archived if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"
    ]
    results = [
        b["tool_use_id"]
        for m in archived
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert uses == results == ["tu_1"]
    assert not any("alice" in line.decode() for line in lines_of(history_file) + lines_of(archive_file))

    assert not planted["profile"].exists() and not backup_of(planted["profile"]).exists()
    assert planted["bob_profile"].read_text(encoding="utf-8") == "- Bob prefers the blue team jersey\n"
    assert planted["memory"].read_text(encoding="utf-8") == "# Team\n- Bob prefers blue jerseys\n"
    assert planted["user"].read_text(encoding="utf-8") == "- the team meets on Mondays\n"
    index_files = list((gw.settings.data_dir / "default" / "index").iterdir())
    assert index_files  # the live index stayed (and the grep above found nothing of Alice's in its files)
    meta = await gw.history.get_meta(GROUP)
    assert meta is not None and "4417" not in meta.title

    audits = [e for e in logs if e["event"] == "forget_audit"]
    assert len(audits) == 1
    assert audits[0]["person"] == Person("wecom", "alice").tag and audits[0]["messages"] == 2
    assert not any(s in json.dumps(audits[0], ensure_ascii=False) for s in ["alice", *FACTS])

    await say(gw, "bob", "still here?")  # the redacted history still makes a valid request
    index_hits = await gw.search.search("default", "jersey", SearchScope(None, agent_scoped=lambda _: True), 5)
    assert index_hits  # the index still answers, with Bob's own words
    request = fake_llm.message_requests()[-1].body
    assert not any(fact in json.dumps(request, ensure_ascii=False) for fact in FACTS)


async def test_forget_confirmation_expires_and_is_per_chat(
    team: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, clock = team
    await say(gw, "alice", ALICE_SAYS[0])
    await say(gw, "alice", "/forget")
    clock.advance(31)
    assert "30" in await say(gw, "alice", "/forget")  # too late: asks again
    assert "30" in await say(gw, "alice", "/forget", chat="other")  # the window of another chat is its own
    assert ALICE_SAYS[0] in json.dumps(await gw.history.load(GROUP), ensure_ascii=False)
    assert "已完成" in await say(gw, "alice", "/forget")
    assert ALICE_SAYS[0] not in json.dumps(await gw.history.load(GROUP), ensure_ascii=False)


async def test_forget_in_a_private_chat_deletes_its_memory_file(
    team: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, _ = team
    fake_llm.script(reply_tool("write_memory", {"content": "- locker 4417-ZEBRA"}, tool_id="tu_9"), reply_text("noted"))
    await say(gw, "alice", ALICE_SAYS[0], chat="alice-dm")
    key = SessionKey("default", "wecom", "alice-dm")
    chat_memory = chat_memory_file(gw, gw.agents.get("default"), key)
    assert "4417-ZEBRA" in chat_memory.read_text(encoding="utf-8")
    await say(gw, "alice", "/forget", chat="alice-dm")
    await say(gw, "alice", "/forget", chat="alice-dm")
    assert not chat_memory.exists()
    assert files_with([gw.settings.data_dir, gw.settings.auth_dir], "4417-ZEBRA") == []


def test_a_message_sent_together_with_theirs_stays_but_the_shared_reply_goes() -> None:
    markers = Markers("[gone]", "[reply gone]")
    bob = {"role": "user", "content": "bob's question", "sender_id": "bob", "channel": "wecom", "together": True}
    records: list[dict[str, Any]] = [
        {"role": "user", "content": "alice's secret", "sender_id": "alice", "channel": "wecom"},
        bob,
        {"role": "assistant", "content": "both answered, quoting alice's secret"},
        {"role": "user", "content": "bob alone", "sender_id": "bob", "channel": "wecom"},
        {"role": "assistant", "content": "bob's answer"},
    ]
    done = redact(records, Person("wecom", "alice"), markers, drop_summaries=True)
    assert [r["content"] for r in done.records] == [
        "[gone]",
        "bob's question",
        "[reply gone]",
        "bob alone",
        "bob's answer",
    ]
    assert done.records[1] is bob
    assert redact(done.records, Person("wecom", "alice"), markers, drop_summaries=True).records == done.records


def test_quote_matcher_finds_latin_and_chinese_quotes_but_not_short_common_words() -> None:
    matcher = QuoteMatcher(["My locker code is 4417-ZEBRA, please remember it", "我对榛子过敏很严重"])
    assert matcher.quotes("- user: LOCKER CODE IS 4417-zebra")
    assert matcher.quotes("- 对榛子过敏很")
    assert not matcher.quotes("- my locker is blue")  # under the quote length: a restated fact is not found
    assert not QuoteMatcher(["short"])


async def test_forget_while_their_reply_runs_waits_for_it_drops_their_queue_and_lets_others_run_after(
    team: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    """The interleaving /forget must survive: Alice's reply is in flight (held at the fake model), Bob and Alice
    each queue a message behind it, and Alice confirms /forget. Her running reply is stored and then redacted,
    her queued message is never stored, and Bob's queued turn runs after the redaction, untouched."""
    gw, _ = team
    release = asyncio.Event()
    fake_llm.script(reply_text("noted your locker 4417-ZEBRA", hold=release))
    await say(gw, "alice", "/forget")
    running = await gw.submit(msg("alice", ALICE_SAYS[0]))
    await fake_llm.wait_for_requests(1)
    bob_queued = await gw.submit(msg("bob", BOB_SAYS[0]))
    alice_queued = await gw.submit(msg("alice", ALICE_SAYS[1]))
    confirm = asyncio.create_task(say(gw, "alice", "/forget"))
    await asyncio.sleep(0.05)
    assert not confirm.done(), "the redaction waits for the running turn"
    release.set()
    assert "已完成" in await confirm
    assert isinstance(await running.result(), DoneEvent)
    assert isinstance(await bob_queued.result(), DoneEvent)
    assert not isinstance(await alice_queued.result(), DoneEvent)  # dropped before it was stored

    for fact in FACTS:
        assert files_with([gw.settings.data_dir, gw.settings.auth_dir], fact) == [], fact
    history = await gw.history.load(GROUP)
    assert [m.get("redacted", False) for m in history] == [True, True, False, False]
    assert history[2]["content"] == BOB_SAYS[0] and history[3]["content"].startswith(f"reply to: {BOB_SAYS[0]}")
    bob_request = json.dumps(fake_llm.message_requests()[-1].body, ensure_ascii=False)
    assert BOB_SAYS[0] in bob_request and FACTS[0] not in bob_request  # Bob's turn ran after the redaction


async def test_forgetting_a_cli_person_scrubs_the_repl_line_history(
    team_services: tuple[Services, ManualClock], fake_llm: FakeAnthropic
) -> None:
    services, _ = team_services
    gw = services.gateway
    final = await (await gw.submit(InboundMessage("cli", "direct", "me", ALICE_SAYS[0]))).result()
    assert isinstance(final, DoneEvent)
    lines = gw.settings.data_dir / ".channels" / "cli" / "history"
    lines.parent.mkdir(parents=True)
    lines.write_text(
        f"\n# 2026-12-01 08:00:00\n+{ALICE_SAYS[0]}\n\n# 2026-12-01 08:01:00\n+/status\n", encoding="utf-8"
    )
    report = await gateway_forgetter(services).forget_everywhere(
        [gw.agents.get("default")], Person("cli", "me"), actor="t"
    )
    assert report.messages == 1
    assert files_with([gw.settings.data_dir, gw.settings.auth_dir], FACTS[0]) == []
    assert "+/status" in lines.read_text(encoding="utf-8")


async def test_forget_from_a_message_without_a_sender_touches_nothing(
    team: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    """Without a sender id there is nobody to forget; above all the shared USER.md (the profile path of an
    unknown sender) must not be taken for their profile."""
    gw, _ = team
    shared = gw.settings.auth_dir / "USER.md"
    shared.parent.mkdir(parents=True, exist_ok=True)
    shared.write_text("- the team meets on Mondays\n", encoding="utf-8")
    await say(gw, "alice", ALICE_SAYS[0])
    for _ in range(2):
        final = await (await gw.submit(msg("", "/forget"))).result()
        assert isinstance(final, DoneEvent) and final.full_text == i18n.text("forget.no_sender", "zh-CN")
    assert shared.read_text(encoding="utf-8") == "- the team meets on Mondays\n"
    assert ALICE_SAYS[0] in json.dumps(await gw.history.load(GROUP), ensure_ascii=False)


async def test_an_l3_run_in_flight_during_forget_does_not_write_their_facts_back(
    team: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    """L3 read Alice's messages before her /forget and answers after it: its rewrites (profile, memory) are refused
    and the next run, from the redacted material, never brings her fact back."""
    gw, _ = team
    hold = asyncio.Event()

    def l3_held(body: dict[str, Any]) -> ScriptedReply | None:
        reply = echo_l3(body)
        return dataclasses.replace(reply, hold=hold) if reply is not None and is_l3_request(body) else reply

    fake_llm.responder = l3_held
    await say(gw, "alice", ALICE_SAYS[0])
    await say(gw, "bob", BOB_SAYS[0])
    before = len(fake_llm.message_requests())
    run = asyncio.create_task(gw.timers[L3_TIMER].tick_now())
    await fake_llm.wait_for_requests(before + 1)
    await say(gw, "alice", "/forget")
    assert "已完成" in await say(gw, "alice", "/forget")
    hold.set()
    await run
    roots = [gw.settings.data_dir, gw.settings.auth_dir]
    assert files_with(roots, FACTS[0]) == []
    await gw.timers[L3_TIMER].tick_now()  # the refused files take the (now redacted) material in again
    assert files_with(roots, FACTS[0]) == []
    assert files_with(roots, BOB_SAYS[0]) != []  # Bob's material did reach memory


async def test_forget_deletes_the_inbox_files_of_their_messages_but_keeps_a_picture_another_member_sent_too(
    team: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    """Their file (its text only in the inbox) and their pictures go; Bob's file stays, and so does the picture
    both sent (images are stored once by content)."""
    gw, _ = team
    shared, own = png(30, 30, color=(1, 2, 3)), png(31, 31, color=(9, 8, 7))
    doc = Attachment("file", "alice medical.txt", "text/plain", b"ALICE-MEDICAL-RECORD")
    both = Attachment("image", "team.png", "image/png", shared)
    mine = Attachment("image", "me.png", "image/png", own)
    bobs = Attachment("file", "bob.txt", "text/plain", b"BOB-NOTES")
    for sender, attachments in [("alice", (doc, both, mine)), ("bob", (bobs, both))]:
        message = InboundMessage("wecom", "team", sender, "see this", attachments=attachments, metadata=GROUP_META)
        assert isinstance(await (await gw.submit(message)).result(), DoneEvent)
    inbox = gw.settings.workspace_dir / "default" / "inbox" / "wecom_team"
    assert len(list(inbox.iterdir())) == 4
    await say(gw, "alice", "/forget")
    await say(gw, "alice", "/forget")
    assert files_with([gw.settings.workspace_dir, gw.settings.data_dir], "ALICE-MEDICAL-RECORD") == []
    left = sorted(p.name for p in inbox.iterdir())
    assert left == sorted(["bob.txt", f"{hashlib.sha256(shared).hexdigest()[:32]}.png"])


async def test_their_words_quoted_in_another_members_message_and_repeated_in_its_reply_are_scrubbed(
    team: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    """Bob quotes Alice (as the Feishu channel renders a quote) and the bot's answer to him repeats her words:
    the quoting lines become the marker, the rest of Bob's exchange stays byte for byte."""
    gw, _ = team
    await say(gw, "alice", ALICE_SAYS[0])
    fake_llm.script(reply_text(f"She said: {ALICE_SAYS[0]}\nBob, the answer is yes."))
    await say(gw, "bob", f"> 引用 alice: {ALICE_SAYS[0]}\n\nwhat does that mean?")
    await say(gw, "alice", "/forget")
    await say(gw, "alice", "/forget")
    assert files_with([gw.settings.data_dir, gw.settings.auth_dir], FACTS[0]) == []
    marker = i18n.text("forget.redacted_message", "zh-CN")
    bob, answer = (await gw.history.load(GROUP))[2:4]
    assert bob["sender_id"] == "bob" and bob["content"] == f"> {marker}\n\nwhat does that mean?"
    assert str(answer["content"]).startswith(f"{marker}\nBob, the answer is yes.")


def _job(creator: str, chat: str, number: int) -> Job:
    at = 2_000_000_000.0 + number  # far ahead of the manual clock: none fires during the test
    return Job(f"j{number}", "default", "wecom", chat, "Asia/Shanghai", 0.0, created_by=creator, at=at, text="hi")


async def test_forget_everywhere_removes_their_private_chats_folders_and_every_job_they_created(
    team_services: tuple[Services, ManualClock], fake_llm: FakeAnthropic
) -> None:
    services, _ = team_services
    gw = services.gateway
    await say(gw, "alice", ALICE_SAYS[0], chat="alice-dm")
    await say(gw, "alice", ALICE_SAYS[1])
    await say(gw, "bob", BOB_SAYS[0])
    workspace = gw.settings.workspace_dir / "default"
    dm, group = SessionKey("default", "wecom", "alice-dm"), GROUP
    for key in (dm, group):  # a file each chat sent and a large tool result each chat got
        inbox_dir(workspace, key).mkdir(parents=True)
        (inbox_dir(workspace, key) / "note.txt").write_text(f"{key.chat_id} 4417-ZEBRA", encoding="utf-8")
        await LargeResultStore(workspace, 10, key=key).keep("srv__x", f"{key.chat_id} 4417-ZEBRA " * 5)
    scheduler = services.scheduler
    assert scheduler is not None
    for number, (creator, chat) in enumerate([("alice", "alice-dm"), ("alice", "team"), ("bob", "team")]):
        await scheduler.add(_job(creator, chat, number))
    await gateway_forgetter(services).forget_everywhere([gw.agents.get("default")], Person("wecom", "alice"), actor="t")
    assert not any(folder.exists() for folder in chat_folders(workspace, dm))
    assert all(folder.exists() for folder in chat_folders(workspace, group))  # a group's files are everyone's
    assert [(j.created_by, j.chat_id) for j in scheduler.for_agent("default")] == [("bob", "team")]
    stored = json.loads((gw.settings.data_dir / "default" / "jobs.json").read_text(encoding="utf-8"))
    assert [j["created_by"] for j in stored["jobs"]] == ["bob"]


async def test_forget_everywhere_on_each_backend_leaves_nothing_of_them_in_histories_or_memory(
    backend_settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """Files or PostgreSQL: their private chat's own memory, their profiles and the lines quoting them in a group's
    memory go, their messages are redacted; Bob's profile and lines stay."""
    settings = backend_settings
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    fake_llm.responder = echo_l3
    async with services_on(settings) as services:
        gw = services.gateway
        fake_llm.script(reply_tool("write_memory", {"content": "- locker 4417-ZEBRA"}), reply_text("noted"))
        await say(gw, "alice", ALICE_SAYS[0], chat="alice-dm")
        await say(gw, "alice", ALICE_SAYS[0])  # in the group too
        await say(gw, "bob", BOB_SAYS[0])
        await gw.timers[L3_TIMER].tick_now()  # their profiles and the group's memory, from the chats
        agent, files = gw.agents.get("default"), gw.memory_files
        alice = await files.person_profiles(agent, "wecom", "alice")
        bob = await files.person_profiles(agent, "wecom", "bob")
        dm = MemoryName.chat_memory(SessionKey("default", "wecom", "alice-dm"))
        group_memory = files.memory_name(agent, GROUP)
        assert "4417-ZEBRA" in await files.read(dm) and "4417-ZEBRA" in await files.read(group_memory)
        assert len([n for n in alice if await files.read(n)]) == 2  # private and the group's
        bob_texts = [await files.read(n) for n in bob]

        await gateway_forgetter(services).forget_everywhere([agent], Person("wecom", "alice"), actor="t")
        for name in [*alice, dm, *(n.backup_name() for n in alice)]:
            assert await files.read(name) == "", name
        assert "4417-ZEBRA" not in await files.read(group_memory)
        assert [await files.read(n) for n in bob] == bob_texts and any(bob_texts)
        for key in (GROUP, SessionKey("default", "wecom", "alice-dm")):
            gw.history.evict(key)
            assert "4417-ZEBRA" not in json.dumps(await gw.history.load(key), ensure_ascii=False), key
