"""Feishu webhook events behind a load balancer: one user's messages reach different instances on one database and
are answered in the order the inbox accepted them."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

from structlog.testing import capture_logs

from agenthub.session_keys import SessionKey
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.feishu import FakeFeishu, Harness, message_event, running_channel
from tests.support.fakes.feishu_resources import Resource
from tests.support.feishu import APP, APP_ID, SECRET, TOKEN, post_event
from tests.support.media import png
from tests.support.scheduler import until
from tests.support.shared_gateways import Instance, shared_instances

KEY = SessionKey("default", "feishu", "ou_user1")  # a DM's session is its sender's


async def webhook_on(instance: Instance, fake: FakeFeishu, state_dir: Path, stack: AsyncExitStack) -> Harness:
    """The Feishu webhook app of `instance`, on its inbox and its gateway's routing, as the daemon wires it."""
    gateway = instance.gateway
    channel = running_channel(
        fake, state_dir, {"main": APP}, gateway, inbox=gateway.turn_services.inbox, session_of=gateway.session_of
    )
    return await stack.enter_async_context(channel)


async def test_a_users_text_on_one_instance_waits_for_their_image_still_downloading_on_another(
    fake_llm: FakeAnthropic, postgres_dsn: str, tmp_path: Path
) -> None:
    image = message_event(
        "", token=TOKEN, app_id=APP_ID, message_type="image", content={"image_key": "img_a"}, message_id="om_pic"
    )
    then = message_event("然后是这段文字", token=TOKEN, app_id=APP_ID, message_id="om_text")
    async with (
        shared_instances(tmp_path, fake_llm, postgres_dsn, 2) as (a, b),
        FakeFeishu({APP_ID: SECRET}) as fake,
        AsyncExitStack() as stack,
    ):
        fake.resources.add("om_pic", "img_a", Resource("image", png(16, 16), "image/png"))
        fake.resources.hold()
        on_a = await webhook_on(a, fake, tmp_path / "a", stack)
        on_b = await webhook_on(b, fake, tmp_path / "b", stack)
        assert (await post_event(on_a, image))[0] == 200
        await fake.wait_until(lambda: len(fake.resources.gets) == 1)  # A took the image first: its download runs
        with capture_logs() as logs:
            assert (await post_event(on_b, then))[0] == 200
            await until(lambda: any(e["event"] == "arrival_order_waiting" for e in logs) or fake.closed_cards() > 0, 60)
        fake.resources.release()
        await until(lambda: fake.closed_cards() >= 2, 60)
        history = await b.gateway.history.load(KEY)
        assert [r.get("message_id") for r in history if r["role"] == "user"] == ["om_pic", "om_text"]
        assert len(fake_llm.message_requests()) == 2  # each answered once
