"""A forget leaves nothing of the person's words in what the daemon keeps in memory between a chat's calls (the
per-chat message encodings and prints the model calls reuse), not only in the files."""

from __future__ import annotations

import base64
import gc
import uuid

from agenthub.config import Settings
from agenthub.forget.redact import Person
from agenthub.hosting.app import build_services, gateway_forgetter
from agenthub.messages import Attachment, DoneEvent, InboundMessage
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.forget import PRIVATE_CONFIG, texts_holding
from tests.support.media import png
from tests.support.memory import chat_memory_file, memory_file

GROUP = SessionKey("default", "wecom", "team")


async def test_forget_drops_the_chats_kept_request_parts(settings: Settings, fake_llm: FakeAnthropic) -> None:
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    probe = uuid.uuid4().hex
    async with build_services(settings) as services:
        gw = services.gateway
        for sender, text in (("alice", f"my locker code is {probe}"), ("bob", "and mine is secret too")):
            inbound = InboundMessage("wecom", "team", sender, text, metadata={"chat_type": "group"})
            assert isinstance(await (await gw.submit(inbound)).result(), DoneEvent)
        del inbound, text
        fake_llm.requests.clear()  # the fake model's own record of what it was sent
        gc.collect()
        assert list(texts_holding(probe))  # held while the chat is live (the check can see it)

        await gateway_forgetter(services).forget_everywhere(
            [gw.agents.get("default")], Person("wecom", "alice"), actor="t"
        )
        gc.collect()
        held = list(texts_holding(probe))
        assert held == [], held


async def test_forget_drops_the_system_prompts_kept_with_their_profile(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """Their profile went into the system prompt of their turn, a line of the group's memory quoting them into
    everyone's: the prompt parts kept for the next calls (the built blocks, their encodings and digests, the pinned
    memory) go with the file and the line."""
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    probe, quoted = uuid.uuid4().hex, uuid.uuid4().hex
    async with build_services(settings) as services:
        gw = services.gateway
        agent = gw.agents.get("default")
        profile = memory_file(gw, gw.memory_files.person_profile(agent, GROUP, "alice", "group"))
        profile.parent.mkdir(parents=True, exist_ok=True)
        profile.write_text(f"- her locker code is {probe}\n", encoding="utf-8")
        memory = chat_memory_file(gw, agent, GROUP)
        memory.parent.mkdir(parents=True, exist_ok=True)
        memory.write_text(f"- someone said: my bike lock is {quoted}\n- the team meets on Mondays\n", "utf-8")
        for sender, text in (("alice", f"my bike lock is {quoted}"), ("bob", "hello too")):
            inbound = InboundMessage("wecom", "team", sender, text, metadata={"chat_type": "group"})
            assert isinstance(await (await gw.submit(inbound)).result(), DoneEvent)
        fake_llm.requests.clear()
        gc.collect()
        assert list(texts_holding(probe)) and list(texts_holding(quoted))

        await gateway_forgetter(services).forget_everywhere([agent], Person("wecom", "alice"), actor="t")
        assert not profile.exists() and quoted not in memory.read_text("utf-8")
        gc.collect()
        held = list(texts_holding(probe)) + list(texts_holding(quoted))
        assert held == [], held


async def test_forget_drops_their_pictures_kept_in_memory(settings: Settings, fake_llm: FakeAnthropic) -> None:
    """A picture they sent went to the model from the image cache: with its file, its base64 leaves memory too."""
    write_agent(settings.agents_dir, "default", PRIVATE_CONFIG)
    picture = png(40, 40, noise=True)
    probe = base64.b64encode(picture)[400:464].decode()
    async with build_services(settings) as services:
        gw = services.gateway
        sent = Attachment("image", "me.png", "image/png", picture)
        for sender, attachments in (("alice", (sent,)), ("bob", ())):
            inbound = InboundMessage(
                "wecom", "team", sender, "see this", attachments=attachments, metadata={"chat_type": "group"}
            )
            assert isinstance(await (await gw.submit(inbound)).result(), DoneEvent)
        fake_llm.requests.clear()
        gc.collect()
        assert list(texts_holding(probe))  # the image cache, the chat's request parts

        await gateway_forgetter(services).forget_everywhere(
            [gw.agents.get("default")], Person("wecom", "alice"), actor="t"
        )
        gc.collect()
        held = list(texts_holding(probe))
        assert held == [], held
