"""The one routing rule: a route (known before its message is built) names the session its full message runs in."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage, Route
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic

ROUTES = [
    (Route("wecom", "zhangsan", cred_id="bot2"), "reviewer:wecom:zhangsan"),  # the channel:cred_id binding
    (Route("wecom", "wr_group:zhangsan", cred_id="bot1"), "default:wecom:wr_group:zhangsan"),  # a member of a group
    (Route("wecom", "zhangsan", agent="other", cred_id="bot2"), "other:wecom:zhangsan"),  # the app's own agent
    (Route("feishu", "oc_group1:omt_topic", cred_id="main"), "helper:feishu:oc_group1:omt_topic"),  # the channel's
    (Route("cli", "direct"), "default:cli:direct"),
    (Route("cli", "direct", agent="ghost"), None),  # no such agent
    (Route("cli", "../etc"), None),  # no such chat
]


def message_of(route: Route, content: str = "x") -> InboundMessage:
    return InboundMessage(
        route.channel, route.chat_id, "someone", content, agent=route.agent, cred_id=route.cred_id, metadata={"k": 1}
    )


async def test_the_session_of_a_route_is_the_session_its_message_runs_in(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(bindings={"wecom:bot2": "reviewer", "feishu": "helper"})
    for name in ("reviewer", "helper", "other"):
        write_agent(settings.agents_dir, name)
    async with build_gateway(settings) as gw:
        for route, expected in ROUTES:
            message = message_of(route)
            assert message.route == route
            assert gw.session_of(route) == expected, route
            if expected is not None:
                assert str(gw.resolve_key(message)[1]) == expected
        final = await (await gw.submit(message_of(ROUTES[0][0], "hi"))).result()
        assert isinstance(final, DoneEvent) and final.session_key == gw.session_of(ROUTES[0][0])


def test_a_route_is_what_a_message_is_routed_by_and_nothing_else() -> None:
    route = Route("feishu", "oc_1", agent="a", cred_id="c")
    message = message_of(route)
    other_sender = dataclasses.replace(message, sender_id="another", content="else", message_id="m2")
    assert other_sender.route == message.route == route
    assert dataclasses.replace(message, chat_id="oc_2").route != route
