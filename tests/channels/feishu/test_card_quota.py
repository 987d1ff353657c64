"""CardKit's app-wide quota on card updates: many concurrent streaming turns share one pace per app."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import aiohttp
import pytest

from agenthub.errors import ConfigError
from channels.feishu.config import parse_config
from channels.feishu.pace import FIRST, NORMAL, URGENT, RateGate
from tests.support.fakes.feishu import FakeFeishu, feishu_encrypt, feishu_headers, message_event, running_channel
from tests.support.fakes.submitter import ScriptedSubmitter

APP_ID, SECRET, TOKEN, KEY = "cli_quota", "s3cret-quota", "vtoken-quota", "enc-key-quota"
APP = {"app_id": APP_ID, "app_secret": SECRET, "mode": "webhook", "verification_token": TOKEN, "encrypt_key": KEY}
TURNS = 20
CAP = (20, 1.0)  # the platform's quota, scaled down from 50/s (and 1000/min) so the test takes seconds
RATE, BURST = 14.0, 4  # at most 18 in any second: under the cap, as the defaults (at most 30) are under 50


def most_in_any_window(times: list[float], window_s: float) -> int:
    ordered = sorted(times)
    return max((sum(1 for t in ordered[i:] if t - start < window_s) for i, start in enumerate(ordered)), default=0)


async def test_concurrent_streaming_turns_stay_under_the_app_wide_card_update_quota(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter(chunks=4, delay_s=0.03)
    app = {**APP, "card_update_interval_s": 0.1, "card_updates_per_s": RATE, "card_update_burst": BURST}
    events = [message_event(f"turn {i}", token=TOKEN, app_id=APP_ID, sender=f"ou_u{i}") for i in range(TURNS)]
    async with FakeFeishu({APP_ID: SECRET}) as fake, running_channel(fake, tmp_path, {"main": app}, gateway) as h:
        fake.card_update_cap = CAP
        async with aiohttp.ClientSession() as s:

            async def post(event: dict[str, object]) -> int:
                body = feishu_encrypt(event, KEY)
                async with s.post(h.events_url("main"), data=body, headers=feishu_headers(body, KEY)) as r:
                    return r.status

            assert await asyncio.gather(*(post(e) for e in events)) == [200] * TURNS
        await fake.wait_until(lambda: fake.closed_cards() == TURNS, timeout=15)
    assert fake.rate_limited == []
    updates = fake.card_update_times[APP_ID]
    assert len(updates) >= TURNS  # every card got at least its final text and close, in one full update
    assert most_in_any_window(updates, CAP[1]) <= CAP[0]
    for i, event in enumerate(events):
        card = fake.card_for_reply(event["event"]["message"]["message_id"])
        assert card.streaming is False and card.content == f"echo: turn {i}"
        assert len(card.full_updates) == 1 and card.settings == []
    assert fake.sequence_errors == []
    assert [m for m in fake.replies() if m.msg_type != "interactive"] == []  # no fallback was needed


class SteppingTime:
    """An injected clock whose sleep advances it at once (after letting woken tasks run)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(0)
        self.now += delay


async def test_rate_gate_spaces_passes_evenly_and_serves_lanes_by_priority() -> None:
    time = SteppingTime()
    gate = RateGate(10.0, clock=time.clock, sleep=time.sleep)
    passed: list[tuple[str, float]] = []

    async def go(name: str, priority: int = NORMAL) -> None:
        assert await gate.wait(priority=priority)
        passed.append((name, time.now))

    await go("opening")
    await asyncio.gather(
        go("n0"), go("n1"), go("final", URGENT), go("n2"), go("first text", FIRST), go("close", URGENT), go("n3")
    )
    assert [name for name, _ in passed] == ["opening", "first text", "final", "close", "n0", "n1", "n2", "n3"]
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(passed)]
    assert all(gap >= 0.1 - 1e-9 for gap in gaps) and passed[-1][1] - passed[0][1] < 0.7 + 1e-6
    assert gate.passes == 8 and gate.waiting == 0
    await gate.close()


async def test_rate_gate_lets_a_burst_through_at_once_then_paces_the_rest() -> None:
    time = SteppingTime()
    gate = RateGate(10.0, burst=3, clock=time.clock, sleep=time.sleep)
    passed: list[float] = []

    async def go() -> None:
        assert await gate.wait()
        passed.append(time.now)

    start = time.now
    await asyncio.gather(*(go() for _ in range(8)))
    assert [round(t - start, 6) for t in passed] == [0.0, 0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    await gate.close()


async def test_rate_gate_waiters_give_up_their_place_when_superseded_or_cancelled() -> None:
    gate = RateGate(0.001)  # the next pass is 1000 s away: nobody queued here gets through
    assert await gate.wait()
    newer = asyncio.Event()
    superseded = asyncio.create_task(gate.wait(unless=newer))
    cancelled = asyncio.create_task(gate.wait(priority=URGENT))
    await asyncio.sleep(0)
    assert gate.waiting == 2
    newer.set()
    assert await asyncio.wait_for(superseded, 1) is False
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert gate.waiting == 0 and gate.passes == 1
    assert await gate.wait(unless=newer) is False  # already superseded: no wait, no pass
    await gate.close()


def test_card_update_pace_must_stay_under_feishus_quota() -> None:
    base = {"app_id": APP_ID, "app_secret": SECRET}
    with pytest.raises(ConfigError, match="card_updates_per_s"):
        parse_config({"apps": {"main": {**base, "card_updates_per_s": 50}}})
    with pytest.raises(ConfigError, match="at most 40"):
        parse_config({"apps": {"main": {**base, "card_updates_per_s": 16, "card_update_burst": 30}}})
    app = parse_config({"apps": {"main": base}}).apps["main"]
    assert (app.card_updates_per_s, app.card_update_burst) == (14.0, 26)


def test_cred_ids_are_lowercase_so_environment_names_reach_them() -> None:
    app = {"app_id": "cli_x", "app_secret": "s"}
    assert list(parse_config({"apps": {"main-bot_2": app}}).apps) == ["main-bot_2"]
    for bad in ("MyBot", "-lead", "a/b", "x" * 65):
        with pytest.raises(ConfigError, match="lowercase"):
            parse_config({"apps": {bad: app}})
