"""`/compact <focus>`: the focus text reaches the summary request as one capped instruction, and /help says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.memory.summary import FOCUS_CHARS
from agenthub.messages import DoneEvent
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.memory import is_summary_request, msg, seed, summaries_then_default


def _summary_prompt(fake: FakeAnthropic) -> str:
    bodies = [r.body or {} for r in fake.message_requests() if is_summary_request(r.body or {})]
    assert len(bodies) == 1
    content: Any = bodies[0]["messages"][0]["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


async def test_the_focus_text_is_sent_with_the_summary_request(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = summaries_then_default("port 8443 on staging")
    async with build_gateway(settings_factory()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 25)
        final = await (await gw.submit(msg("/compact  the deployment port\nand the staging host "))).result()
        assert isinstance(final, DoneEvent) and final.full_text.startswith("Compacted:")
        prompt = _summary_prompt(fake_llm)
        assert "Focus the summary on: the deployment port\nand the staging host\n\nWrite the merged summary" in prompt
        assert prompt.index("</conversation>") < prompt.index("Focus the summary on:")


async def test_a_long_focus_is_capped_and_no_focus_adds_nothing(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = summaries_then_default("short")
    async with build_gateway(settings_factory()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 25)
        await (await gw.submit(msg("/compact " + "keep ids " * 400))).result()
        prompt = _summary_prompt(fake_llm)
        focus = prompt[prompt.index("Focus the summary on: ") :].split("\n\n")[0]
        assert len(focus) == len("Focus the summary on: ") + FOCUS_CHARS and focus.endswith("…")

        other = gw.resolve_key(msg("x", chat="c2"))[1]
        await seed(gw, other, 25)
        fake_llm.requests.clear()
        await (await gw.submit(msg("/compact", chat="c2"))).result()
        assert "Focus the summary on" not in _summary_prompt(fake_llm)


async def test_help_tells_about_the_focus(settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic) -> None:
    async with build_gateway(settings_factory()) as gw:
        final = await (await gw.submit(msg("/help"))).result()
        assert isinstance(final, DoneEvent)
        line = next(x for x in final.full_text.splitlines() if x.startswith("/compact"))
        assert "/compact <focus>" in line
