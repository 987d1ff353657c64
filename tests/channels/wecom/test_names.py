"""WeCom senders' display names: the app's `user/get` (读取成员), cached; AI bots name senders through an app of the
same corp (their frames carry only `from.userid`); a group's budget refusal names the member."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from wechatpy.enterprise import WeChatClient
from wechatpy.exceptions import WeChatClientException

from agenthub.config import Settings
from agenthub.errors import ConfigError
from agenthub.hosting.app import build_gateway
from agenthub.messages import SENDER_NAME
from channels.wecom import WeComChannel
from channels.wecom.config import load_config
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.fakes.wecom import FakeAiBotServer, FakeQyApi, channel_context
from tests.support.wecom import CORP_ID, SECRET, Harness, app_table, bot_table, text

PER_CALL = {"input_tokens": 200, "output_tokens": 100}


class _ClientOnFake(WeChatClient):  # type: ignore[misc]
    """wechatpy's own client aimed at the fake (its token URL is fixed to qyapi.weixin.qq.com)."""

    def fetch_access_token(self) -> Any:
        return self._fetch_access_token(
            url=self.API_BASE_URL + "gettoken", params={"corpid": self.corp_id, "corpsecret": self.secret}
        )


def wechatpy_client(api: FakeQyApi) -> Any:
    client = _ClientOnFake(CORP_ID, SECRET, timeout=5)
    client.API_BASE_URL = api.url + "/cgi-bin/"
    return client


async def test_the_fake_answers_wechatpys_user_get_as_wecom_does(api: FakeQyApi) -> None:
    api.members.add("zhangsan", "张三")
    api.members.add("hidden", "隐藏", visible=False)
    client = wechatpy_client(api)
    member = await asyncio.to_thread(client.user.get, "zhangsan")
    assert (member["errcode"], member["userid"], member["name"]) == (0, "zhangsan", "张三")
    with pytest.raises(WeChatClientException) as refused:
        await asyncio.to_thread(client.user.get, "hidden")
    assert refused.value.errcode == 60011
    assert api.members.gets == ["zhangsan", "hidden"]


async def test_a_message_carries_its_senders_display_name_looked_up_once(harness: Harness, api: FakeQyApi) -> None:
    api.members.add("zhangsan", "张三")
    await harness.start()
    for n in range(3):
        assert (await harness.post(text(f"第{n}条", msg_id=7100 + n)))[0] == 200
    await harness.submitter.wait_for(3)
    assert [m.metadata.get(SENDER_NAME) for m in harness.submitter.received] == ["张三"] * 3
    assert [m.sender_id for m in harness.submitter.received] == ["zhangsan"] * 3
    assert api.members.gets == ["zhangsan"]  # the cache answered the second and third


async def test_a_failed_lookup_names_the_sender_by_userid_and_says_why_once(harness: Harness, api: FakeQyApi) -> None:
    api.members.add("lisi", "李四", visible=False)
    await harness.start()
    with structlog.testing.capture_logs() as logs:
        for n in range(2):
            assert (await harness.post(text("你好", msg_id=7200 + n, user="lisi")))[0] == 200
        await harness.submitter.wait_for(2)
    assert [m.metadata.get(SENDER_NAME) for m in harness.submitter.received] == [None, None]
    assert api.members.gets == ["lisi"]  # remembered as unnamed, not asked for every message
    unknown = [e for e in logs if e["event"] == "sender_name_unknown"]
    assert len(unknown) == 1 and "可见范围" in unknown[0]["hint"]


async def test_a_permission_error_is_logged_once_with_the_hint_and_lookups_pause(
    harness: Harness, api: FakeQyApi
) -> None:
    api.members.add("a", "甲")
    api.members.add("b", "乙")
    api.members.errcodes = [48002]
    await harness.start()
    with structlog.testing.capture_logs() as logs:
        for n, user in enumerate(["a", "b", "a"]):
            assert (await harness.post(text("hi", msg_id=7300 + n, user=user)))[0] == 200
        await harness.submitter.wait_for(3)
    assert [m.metadata.get(SENDER_NAME) for m in harness.submitter.received] == [None, None, None]
    assert api.members.gets == ["a"]
    refused = [e for e in logs if e["event"] == "sender_names_not_permitted"]
    assert len(refused) == 1 and "user/get" in refused[0]["hint"]


async def test_concurrent_first_messages_of_one_member_make_one_user_get(harness: Harness, api: FakeQyApi) -> None:
    api.members.add("wangwu", "王五")
    api.members.hold()
    channel = await harness.start()
    names = channel.apps["hr"].names
    assert names is not None
    asking = [asyncio.create_task(names.name("wangwu")) for _ in range(6)]
    await api.wait_for(lambda: len(api.members.gets) >= 1)
    api.members.release()
    assert set(await asyncio.gather(*asking)) <= {"王五", None}  # a waiter past `wait_s` got the userid
    assert await names.name("wangwu") == "王五"
    assert api.members.gets == ["wangwu"]


async def test_sender_names_off_makes_no_lookup(harness: Harness, api: FakeQyApi) -> None:
    api.members.add("zhangsan", "张三")
    await harness.start(sender_names=False)
    assert (await harness.post(text("你好")))[0] == 200
    await harness.submitter.wait_for(1)
    assert SENDER_NAME not in harness.submitter.received[0].metadata and api.members.gets == []


def test_names_from_app_must_name_a_configured_app() -> None:
    table = {"bots": {"team": {"bot_id": "b", "secret": "s", "names_from_app": "nope"}}}
    with pytest.raises(ConfigError, match=r"bots\.team\.names_from_app"):
        load_config(table)


async def test_a_group_refusal_names_the_member_by_display_name_through_the_bots_app(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    """Default locale (zh-CN): bob spent his day; alice's and bob's messages wait behind carol's turn and go as one
    turn, which is refused before any model call naming bob by the name WeCom gives him, not by his userid."""
    settings = settings_factory(budgets={"user_day": 300}, llm={"max_tokens": 100})
    fake_llm.default_usage = PER_CALL
    api = await FakeQyApi(CORP_ID, SECRET).start()
    server = await FakeAiBotServer("aib-names", "bot-secret").start()
    api.members.add("bob", "王小明")
    table: dict[str, Any] = {**app_table(api), **bot_table(server, bot_id="aib-names", secret="bot-secret")}
    table["apps"]["hr"]["agent"] = None
    table["bots"]["team"].update(agent=None, bot_name="AgentHub", names_from_app="hr")
    release = asyncio.Event()
    fake_llm.script(reply_text("bob's answer"), reply_text("to carol", hold=release))
    async with build_gateway(settings) as gateway:
        channel = WeComChannel(channel_context(gateway, tmp_path / "state", settings), table)
        await channel.start()
        try:
            say = _group_sayer(server)
            first = await say("bob", "spend my day", "m1")
            await server.wait_for(lambda: any(s["finish"] for s in server.streams(first)), timeout=10)
            carol = await say("carol", "carol asks", "m2")
            await fake_llm.wait_for_requests(2)
            before = len(fake_llm.message_requests())
            alice, bob = await say("alice", "alice asks", "m3"), await say("bob", "bob asks", "m4")
            await asyncio.sleep(0.3)  # both are in the chat's queue behind carol's turn
            release.set()
            ended = [carol, alice, bob]
            await server.wait_for(lambda: all(any(s["finish"] for s in server.streams(r)) for r in ended), timeout=10)
        finally:
            await channel.stop()
            await server.close()
            await api.close()
    assert len(fake_llm.message_requests()) == before  # the joined turn never reached the model
    refused = [s["content"] for r in (alice, bob) for s in server.streams(r) if s["finish"]]
    assert any("王小明 的每日用量额度（300 tokens）已用完" in c for c in refused), refused
    assert not any("bob" in c for c in refused)
    assert api.members.gets.count("bob") == 1


def _group_sayer(server: FakeAiBotServer) -> Callable[[str, str, str], Any]:
    async def say(user: str, words: str, msgid: str) -> str:
        body = server.text_body(f"@AgentHub {words}", msgid=msgid, user=user, chattype="group", chatid="grp1")
        return await server.send_message(body)

    return say
