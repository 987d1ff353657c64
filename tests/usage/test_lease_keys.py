"""A lease's key: equal (and hashed alike) exactly when its day and claims are; the chat's and the agent's parts of
every turn shape one key object a day; the warnings a lease's turns reach, worked out once per lease."""

from __future__ import annotations

import itertools

from agenthub.storage.usage import Claim, Scope, Standing, judge
from agenthub.usage.leases import Grant, Lease, LeaseKey, lease_parts

DAY, NEXT = "2026-12-04", "2026-12-05"
AGENT = Claim(Scope("agent", "", "default"), 0, 10**9)


def _claims(person: str, chat: str) -> list[Claim]:
    return [
        Claim(Scope("user", "wecom", person), 10_000, 90_000),
        Claim(Scope("chat", "wecom", chat), 50_000),
        Claim(Scope("agent", "", "default"), 0, 10**9),  # made anew: equal to AGENT, not it
    ]


def test_keys_are_equal_and_hashed_alike_exactly_when_their_day_and_claims_are() -> None:
    alice = Claim(Scope("user", "wecom", "alice"), 10, 20)
    same = LeaseKey(DAY, (Claim(Scope("user", "wecom", "alice"), 10, 20),))
    assert LeaseKey(DAY, (alice,)) == same and hash(LeaseKey(DAY, (alice,))) == hash(same)
    others = [
        LeaseKey(NEXT, (alice,)),
        LeaseKey(DAY, (Claim(Scope("user", "wecom", "alice"), 10, 21),)),
        LeaseKey(DAY, (Claim(Scope("user", "wecom", "bob"), 10, 20),)),
        LeaseKey(DAY, (Claim(Scope("chat", "wecom", "alice"), 10, 20),)),
        LeaseKey(DAY, (Claim(Scope("user", "slack", "alice"), 10, 20),)),
        LeaseKey(DAY, (alice, Claim(Scope("user", "wecom", "bob"), 10, 20))),
    ]
    for a, b in itertools.combinations([same, *others], 2):
        assert a != b
    assert {same: 1}.get(LeaseKey(DAY, (alice,))) == 1


def test_the_chat_and_agent_parts_are_one_key_object_a_day_across_turn_shapes() -> None:
    shared: dict[Claim, LeaseKey] = {}
    alice = lease_parts(DAY, _claims("alice", "g"), shared)
    bob = lease_parts(DAY, _claims("bob", "g"), shared)
    assert [p.claims for p in alice] == [(c,) for c in _claims("alice", "g")]
    assert alice[0] != bob[0]  # each person's own part
    assert alice[1] is bob[1] and alice[2] is bob[2]  # the chat's and the agent's: one key each
    carol = lease_parts(DAY, _claims("carol", "h"), shared)
    assert carol[1] != alice[1] and carol[2] is alice[2]  # another chat, the same agent
    tomorrow = lease_parts(NEXT, _claims("alice", "g"), shared)
    assert tomorrow[2].day == NEXT and tomorrow[2] != alice[2]  # a new day: new keys
    assert lease_parts(DAY, _claims("alice", "g")) == alice  # without `shared`: equal keys all the same


def test_a_lease_warns_from_the_committed_tokens_where_any_limit_reaches_the_share() -> None:
    used = {"user:wecom:alice": (6_999, 80_001), "chat:wecom:g": (49_000, 0)}
    standings, _ = judge(_claims("alice", "g")[:2], used)
    lease = Lease(Grant("r"), 8_000, 0.0, standings)
    empty = Lease(Grant("r"), 8_000, 0.0, [])
    for warn_at in (0.0, 0.7, 0.8, 0.9, 0.95, 1.0, 1.5):
        for committed in range(0, 9_000, 7):
            crosses = any(s.used + committed >= warn_at * s.limit for s in standings)  # the rule, per standing
            assert (committed >= lease.warns_from(warn_at)) is crosses, (warn_at, committed)
            assert committed < empty.warns_from(warn_at)


def test_a_warning_share_worked_out_once_follows_a_changed_share() -> None:
    lease = Lease(Grant("r"), 8_000, 0.0, [Standing(Scope("user", "wecom", "a"), "day", 10_000, 5_000)])
    assert lease.warns_from(0.8) == 3_000
    assert lease.warns_from(0.9) == 4_000  # a reloaded agent warns at another share
