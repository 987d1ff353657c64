"""An event is stored with the session its submitted message runs in: the inbox names it from the event's route
(the chat as the app scopes group sessions, the agent, the app), by the gateway's rule, before any message is
built."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenthub.config import Settings
from tests.support.fakes.feishu import FakeFeishu, mention, message_event, running_channel
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP, APP_ID, BOT, SECRET, TOKEN, post_event
from tests.support.routing import naming


def group_event(text: str, sender: str = "ou_user1", **kw: Any) -> dict[str, Any]:
    mentions = [mention("@_user_1", BOT, "Bot")]
    return message_event(
        text, token=TOKEN, app_id=APP_ID, chat_type="group", chat_id="oc_group1", sender=sender, mentions=mentions, **kw
    )


async def test_events_of_a_chat_a_group_and_a_topic_are_stored_with_their_messages_sessions(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    gateway = ScriptedSubmitter()
    app = {**APP, "group_session_scope": "group_topic"}
    async with (
        naming(settings_factory(bindings={"feishu:main": "reviewer"})) as routes,
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": app}, gateway, session_of=routes) as h,
    ):
        await post_event(h, message_event("私聊", token=TOKEN, app_id=APP_ID))
        await gateway.wait_for(1)
        await post_event(h, group_event("@_user_1 群聊"))
        await gateway.wait_for(2)
        await post_event(h, group_event("@_user_1 话题里", root_id="om_root1"))
        await gateway.wait_for(3)
        assert routes.named == [
            "reviewer:feishu:ou_user1",
            "reviewer:feishu:oc_group1",
            "reviewer:feishu:oc_group1:om_root1",
        ]
        assert routes.named == routes.sessions_of(gateway.received)


async def test_a_per_member_topic_session_of_an_apps_own_agent_is_stored_as_its_message_runs(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    gateway = ScriptedSubmitter()
    app = {**APP, "group_session_scope": "group_topic_sender", "agent": "helper"}
    async with (
        naming(settings_factory(bindings={"feishu": "reviewer"})) as routes,
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": app}, gateway, session_of=routes) as h,
    ):
        await post_event(h, group_event("@_user_1 话题里", sender="ou_bob", root_id="om_root1"))
        await gateway.wait_for(1)
        assert routes.named == ["helper:feishu:oc_group1:om_root1:ou_bob"]
        assert routes.named == routes.sessions_of(gateway.received)
