"""A lease is asked with lowered limits; the standings it keeps (for the warnings of its later turns) carry the real
ones, each scope's and period's own, whatever order a store answers in."""

from __future__ import annotations

from agenthub.storage.usage import Claim, Scope, judge
from agenthub.usage.leases import LeaseKey, lease_claims
from agenthub.usage.reserve_calls import _standings

ALICE = Scope("user", "wecom", "alice")
CHAT = Scope("chat", "wecom", "g")
AGENT = Scope("agent", "", "default")
CLAIMS = [Claim(ALICE, 10_000, 90_000), Claim(CHAT, 0, 50_000), Claim(AGENT, 70_000, 0)]
USED = {ALICE.key: (100, 2_000), CHAT.key: (0, 3_000), AGENT.key: (4_000, 0)}
REAL = [(s.scope.key, s.period, s.limit, s.used) for s in judge(CLAIMS, USED)[0]]


def test_the_standings_of_a_lease_carry_the_real_limits_in_the_claims_order() -> None:
    asked = lease_claims(CLAIMS, 1_000)
    assert asked is not None
    lowered = judge(asked, USED)[0]
    assert [s.limit for s in lowered] != [r[2] for r in REAL]  # the store saw lowered limits
    assert [(s.scope.key, s.period, s.limit, s.used) for s in _standings(CLAIMS, lowered)] == REAL


def test_standings_in_another_order_are_judged_again() -> None:
    asked = lease_claims(CLAIMS, 1_000)
    assert asked is not None
    shuffled = list(reversed(judge(asked, USED)[0]))
    assert [(s.scope.key, s.period, s.limit, s.used) for s in _standings(CLAIMS, shuffled)] == REAL


def test_a_lease_key_counts_the_standings_of_its_claims() -> None:
    assert [LeaseKey("2026-12-04", (c,)).limits for c in CLAIMS] == [2, 1, 1]
    assert LeaseKey("2026-12-04", tuple(CLAIMS)).limits == len(REAL) == 4


def test_judging_gives_every_limits_standing_and_the_first_reached_in_the_claims_order() -> None:
    full = {ALICE.key: (100, 90_000), CHAT.key: (0, 50_000), AGENT.key: (70_000, 0)}  # every limit reached
    standings, refused = judge(CLAIMS, full)
    assert [(s.scope, s.period, s.limit, s.used) for s in standings] == [
        (ALICE, "day", 10_000, 100),
        (ALICE, "month", 90_000, 90_000),
        (CHAT, "month", 50_000, 50_000),
        (AGENT, "day", 70_000, 70_000),
    ]
    assert refused is standings[1]  # the first reached: alice's month (her day is not)
    assert judge(CLAIMS, {AGENT.key: (70_000, 0)})[1] is not None  # a scope the store has no row of: nothing used
    assert judge(CLAIMS, {})[1] is None
    assert judge(CLAIMS, USED)[1] is None
