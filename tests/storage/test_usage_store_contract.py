"""The UsageStore contract on every backend's `Stores`: recorded calls roll up by day, a reservation counts against
a limit until released, a warning is due once per scope and period (the full suite: test_usage_store.py)."""

from __future__ import annotations

import asyncio

from agenthub.storage.stores import Stores
from agenthub.storage.usage import Claim, Forgotten, Scope, UsageRow

DAY = "2026-12-03"
ALICE = Scope("user", "wecom", "alice")


def _row(tokens: int, day: str = DAY, sender: str = "alice") -> UsageRow:
    return UsageRow(day, "turn", "default", "wecom", "g1", sender, "m", input=tokens)


async def test_recorded_calls_roll_up_by_day(backend_stores: Stores) -> None:
    usage = backend_stores.usage
    await usage.add([_row(300), _row(200), _row(50, day="2026-12-01"), _row(7, sender="bob")])
    days = await usage.days("2026-12-01", "2026-12-31")
    assert sorted((r.day, r.sender_id, r.tokens) for r in days) == [
        ("2026-12-01", "alice", 50),
        (DAY, "alice", 500),
        (DAY, "bob", 7),
    ]
    assert await usage.days("2027-01-01", "2027-01-31") == []


async def test_a_reservation_counts_against_the_limit_until_released(backend_stores: Stores) -> None:
    usage = backend_stores.usage
    await usage.add([_row(700)])  # 700 used + 300 reserved reaches the limit
    held = await usage.reserve([Claim(ALICE, day_limit=1000)], DAY, 300, 60.0)
    assert held.id is not None
    refused = await usage.reserve([Claim(ALICE, day_limit=1000)], DAY, 300, 60.0)
    assert refused.id is None and refused.refused is not None and refused.refused.limit == 1000
    await usage.release(held.id)
    assert (await usage.reserve([Claim(ALICE, day_limit=1000)], DAY, 300, 60.0)).id is not None


async def test_a_check_leaves_out_the_reservations_it_is_told_to_ignore_and_only_those(backend_stores: Stores) -> None:
    """A settled turn whose usage is stored, its release not written yet: the instance's check leaves it out."""
    usage = backend_stores.usage
    chat = Scope("chat", "wecom", "g1")
    await usage.add([_row(400)])
    settled = await usage.reserve([Claim(ALICE, day_limit=1000), Claim(chat, day_limit=10**6)], DAY, 300, 60.0)
    running = await usage.reserve([Claim(ALICE, day_limit=1000)], DAY, 250, 60.0)
    assert settled.id is not None and running.id is not None
    claims = [Claim(ALICE, day_limit=1000), Claim(chat, day_limit=10**6)]
    counted = await usage.reserve(claims, DAY, 1, 60.0, ignore=["not-a-reservation"])
    assert counted.refused is None
    assert {(s.scope, s.used) for s in counted.standings} == {(ALICE, 950), (chat, 700)}
    left_out = await usage.reserve(claims, DAY, 1, 60.0, ignore=[settled.id, "not-a-reservation"])
    assert {(s.scope, s.used) for s in left_out.standings} == {(ALICE, 651), (chat, 401)}
    again = await usage.reserve([Claim(ALICE, day_limit=1000)], DAY, 1, 60.0)  # nothing left out: every one counts
    assert [s.used for s in again.standings] == [400 + 300 + 250 + 1 + 1]


async def test_a_warning_is_due_once_per_scope_and_period(backend_stores: Stores) -> None:
    usage = backend_stores.usage
    assert await usage.first_warning(ALICE.key, DAY)
    assert not await usage.first_warning(ALICE.key, DAY)
    assert await usage.first_warning(ALICE.key, "2026-12")


async def test_senders_names_many_writers_the_latest_wins_and_a_forget_takes_the_name(backend_stores: Stores) -> None:
    usage = backend_stores.usage
    people = [("wecom", f"p{n}") for n in range(20)]
    await asyncio.gather(
        *(usage.name_senders({who: f"Person {n}"}) for n, who in enumerate(people)),
        usage.name_senders({("wecom", "alice"): "Alice"}),
    )
    await usage.name_senders({("wecom", "alice"): "王小丽", ("feishu", "alice"): "Alice F."})
    asked = {("wecom", "alice"), ("feishu", "alice"), ("wecom", "nobody"), *people}
    names = await usage.sender_names(asked)
    assert names == {
        ("wecom", "alice"): "王小丽",
        ("feishu", "alice"): "Alice F.",
        **{who: f"Person {n}" for n, who in enumerate(people)},
    }
    await usage.forget(Forgotten("wecom", "alice", "forgotten-0123456789abcdef", ("default",)))
    assert await usage.sender_names({("wecom", "alice"), ("feishu", "alice")}) == {("feishu", "alice"): "Alice F."}
    assert await usage.sender_names(set()) == {}


async def test_retention_folds_old_months_into_month_rows_and_keeps_recent_days(backend_stores: Stores) -> None:
    usage = backend_stores.usage
    old = [_row(100, day="2024-01-05"), _row(20, day="2024-01-31"), _row(3, day="2024-01-31", sender="bob")]
    await usage.add([*old, _row(7, day="2024-02-01"), _row(50)])
    await usage.days("2024-01-01", "2024-01-31")  # a read writes the old days' roll-ups (files): folded too
    assert await usage.prune("2024-02") == 3
    rows = await usage.days("2024-01-01", "2026-12-31")
    assert sorted((r.day, r.sender_id, r.tokens, r.calls) for r in rows) == [
        ("2024-01", "alice", 120, 2),
        ("2024-01", "bob", 3, 1),
        ("2024-02-01", "alice", 7, 1),
        (DAY, "alice", 50, 1),
    ]
    assert await usage.prune("2024-02") == 0  # again: nothing more to fold, the month rows unchanged
    assert sorted(r.tokens for r in await usage.days("2024-01-01", "2024-01-31")) == [3, 120]
    await usage.forget(Forgotten("wecom", "bob", "forgotten-0123456789abcdef", ("default",)))
    assert {r.sender_id for r in await usage.days("2024-01-01", "2024-01-31")} == {
        "alice",
        "forgotten-0123456789abcdef",
    }
    held = await usage.reserve([Claim(ALICE, day_limit=60, month_limit=60)], DAY, 10, 60.0)
    assert held.id is not None  # this month's 50 still counted (and only it): 50 < 60, then 60 with this one
    assert (await usage.reserve([Claim(ALICE, month_limit=60)], DAY, 5, 60.0)).refused is not None


async def test_a_name_holding_nul_or_a_lone_surrogate_is_kept_on_every_backend(backend_stores: Stores) -> None:
    """A channel's directory may give a display name holding NUL or a lone surrogate (JSON's \\u0000, \\ud800), which
    a PostgreSQL text column refuses: the name is kept with U+FFFD in their place, the same on every backend, and
    the usage rows written with it are stored (a refused name failed every later flush of the recorder)."""
    usage = backend_stores.usage
    await usage.name_senders({("feishu", "ou_1"): "Ev\x00an", ("feishu", "ou_2"): "Li\ud800"})
    await usage.add([_row(5, sender="ou_1")])
    assert await usage.sender_names({("feishu", "ou_1"), ("feishu", "ou_2")}) == {
        ("feishu", "ou_1"): "Ev\ufffdan",
        ("feishu", "ou_2"): "Li\ufffd",
    }
    assert [r.tokens for r in await usage.days(DAY, DAY)] == [5]
