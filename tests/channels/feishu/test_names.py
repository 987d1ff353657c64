"""Feishu senders' display names through contact v3 (`GET /open-apis/contact/v3/users/:id?user_id_type=open_id`),
cached; a missing contact scope is logged once with the scopes to grant; a group's budget refusal names the member."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import SENDER_NAME
from channels.feishu import doctor
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.fakes.feishu import FakeFeishu, mention, message_event, running_channel
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP, APP_ID, BOT, SECRET, TOKEN, post_event

PER_CALL = {"input_tokens": 200, "output_tokens": 100}


def group_event(text: str, sender: str, **kw: Any) -> dict[str, Any]:
    mentions = [mention("@_user_1", BOT, "Bot")]
    return message_event(
        f"@_user_1 {text}", token=TOKEN, app_id=APP_ID, chat_type="group", chat_id="oc_team", sender=sender,
        mentions=mentions, **kw,
    )  # fmt: skip


async def test_the_fake_answers_lark_oapis_user_get_as_feishu_does() -> None:
    import lark_oapi as lark
    from lark_oapi.api.contact.v3 import GetUserRequest

    async with FakeFeishu({APP_ID: SECRET}) as fake:
        fake.contacts.add("ou_bob", "王小明", en_name="Bob Wang")
        client = lark.Client.builder().app_id(APP_ID).app_secret(SECRET).domain(fake.url).build()

        def get(open_id: str) -> Any:
            request = GetUserRequest.builder().user_id(open_id).user_id_type("open_id").build()
            return client.contact.v3.user.get(request)

        found = await asyncio.to_thread(get, "ou_bob")
        assert found.success() and (found.data.user.name, found.data.user.en_name) == ("王小明", "Bob Wang")
        outside = await asyncio.to_thread(get, "ou_stranger")
        fake.contacts.denied = True
        denied = await asyncio.to_thread(get, "ou_bob")
    assert (outside.code, denied.code) == (41050, 99991672)
    assert "contact:contact.base:readonly" in denied.msg
    assert fake.contacts.gets[0] == ("ou_bob", {"user_id_type": "open_id"})


async def test_a_message_carries_its_senders_display_name_looked_up_once(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with FakeFeishu({APP_ID: SECRET}) as fake, running_channel(fake, tmp_path, {"main": APP}, gateway) as h:
        fake.contacts.add("ou_bob", "王小明")
        for n in range(3):
            await post_event(h, group_event(f"第{n}条", "ou_bob"))
        await gateway.wait_for(3)
    assert [m.metadata.get(SENDER_NAME) for m in gateway.received] == ["王小明"] * 3
    assert [m.sender_id for m in gateway.received] == ["ou_bob"] * 3
    assert [user for user, _ in fake.contacts.gets] == ["ou_bob"]


async def test_without_the_contact_scope_the_open_id_is_used_and_the_scopes_are_named_once(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with FakeFeishu({APP_ID: SECRET}) as fake, running_channel(fake, tmp_path, {"main": APP}, gateway) as h:
        fake.contacts.add("ou_a", "甲")
        fake.contacts.add("ou_b", "乙")
        fake.contacts.denied = True
        with structlog.testing.capture_logs() as logs:
            for n, sender in enumerate(("ou_a", "ou_b", "ou_a")):
                await post_event(h, group_event("hi", sender))
                await gateway.wait_for(n + 1)
    assert [m.metadata.get(SENDER_NAME) for m in gateway.received] == [None, None, None]
    assert len(fake.contacts.gets) == 1  # no lookups while the app may not read contacts
    refused = [e for e in logs if e["event"] == "sender_names_not_permitted"]
    assert len(refused) == 1 and "contact:user.base:readonly" in refused[0]["hint"]


async def test_users_without_the_name_field_are_named_by_open_id_with_the_scope_hint(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with FakeFeishu({APP_ID: SECRET}) as fake, running_channel(fake, tmp_path, {"main": APP}, gateway) as h:
        fake.contacts.add("ou_a", "甲")
        fake.contacts.names_granted = False  # 获取用户基本信息 not granted: users come back without names
        with structlog.testing.capture_logs() as logs:
            await post_event(h, group_event("hi", "ou_a"))
            await gateway.wait_for(1)
    assert SENDER_NAME not in gateway.received[0].metadata
    unknown = [e for e in logs if e["event"] == "sender_name_unknown"]
    assert len(unknown) == 1 and "contact:user.base:readonly" in unknown[0]["hint"]


async def test_a_slow_contact_api_does_not_hold_the_message_and_names_the_next_one(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    app = {**APP, "sender_name_wait_s": 0.1}
    async with FakeFeishu({APP_ID: SECRET}) as fake, running_channel(fake, tmp_path, {"main": app}, gateway) as h:
        fake.contacts.add("ou_bob", "王小明")
        fake.contacts.hold()
        await post_event(h, group_event("first", "ou_bob"))
        await gateway.wait_for(1)  # submitted with the open_id while the lookup still runs
        fake.contacts.release()
        await fake.wait_until(lambda: h.channel.apps["main"].names.cached("ou_bob")[0])
        await post_event(h, group_event("second", "ou_bob"))
        await gateway.wait_for(2)
    assert [m.metadata.get(SENDER_NAME) for m in gateway.received] == [None, "王小明"]
    assert len(fake.contacts.gets) == 1


async def test_a_group_refusal_names_the_member_by_display_name(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    """Default locale (zh-CN): bob spent his day; alice's and bob's messages wait behind carol's turn and go as one
    turn, refused before any model call, naming bob by his Feishu name rather than his open_id."""
    settings = settings_factory(budgets={"user_day": 300}, llm={"max_tokens": 100})
    fake_llm.default_usage = PER_CALL
    release = asyncio.Event()
    fake_llm.script(reply_text("bob's answer"), reply_text("to carol", hold=release))
    async with (
        build_gateway(settings) as gateway,
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path / "state", {"main": APP}, gateway) as h,
    ):
        fake.contacts.add("ou_bob", "王小明")
        await post_event(h, group_event("spend my day", "ou_bob", message_id="om_1"))
        await fake.wait_until(lambda: fake.closed_cards() == 1, timeout=10)
        await post_event(h, group_event("carol asks", "ou_carol", message_id="om_2"))
        await fake_llm.wait_for_requests(2)
        before = len(fake_llm.message_requests())
        await post_event(h, group_event("alice asks", "ou_alice", message_id="om_3"))
        await post_event(h, group_event("bob asks", "ou_bob", message_id="om_4"))
        await asyncio.sleep(0.3)  # both are in the chat's queue behind carol's turn
        release.set()
        await fake.wait_until(lambda: _shown(fake, "已用完"), timeout=10)
    assert len(fake_llm.message_requests()) == before  # the joined turn never reached the model
    refusals = [t for t in _texts(fake) if "已用完" in t]
    assert any("王小明 的每日用量额度（300 tokens）已用完" in t for t in refusals), refusals
    assert not any("ou_bob" in t for t in refusals)
    assert [user for user, _ in fake.contacts.gets].count("ou_bob") == 1


def _texts(fake: FakeFeishu) -> list[str]:
    """Everything the app showed: card texts and messages."""
    return [c.content for c in fake.cards.values()] + [json.dumps(m.content, ensure_ascii=False) for m in fake.messages]


def _shown(fake: FakeFeishu, words: str) -> bool:
    return any(words in t for t in _texts(fake))


async def test_the_doctor_says_whether_the_app_may_read_contacts_and_what_to_grant() -> None:
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        table = {"apps": {"main": {"app_id": APP_ID, "app_secret": SECRET, "domain": fake.url}}}
        allowed = await doctor.checks(table)
        fake.contacts.denied = True
        refused = await doctor.checks(table)
    assert [(c.name, c.status) for c in allowed] == [("feishu main", "ok"), ("feishu main names", "ok")]
    assert [(c.name, c.status) for c in refused] == [("feishu main", "ok"), ("feishu main names", "warn")]
    assert "99991672" in refused[1].detail and "contact:user.base:readonly" in refused[1].hint
