"""A lease stops admitting `admit_s` after it was granted, whether or not a turn comes: its grant is released once
every part of it has ended (one timer for the instance's grants, which end in the order they were granted)."""

from __future__ import annotations

import asyncio

from agenthub.storage.usage import Claim, Scope
from agenthub.usage.leases import Grant, LeaseKey, Leases

DAY = "2026-12-04"
ADMIT_S = 1.0


def _key(ident: str) -> LeaseKey:
    return LeaseKey(DAY, (Claim(Scope("chat", "wecom", ident), 10**9),))


async def test_leases_end_when_their_time_is_up_in_the_order_they_were_granted() -> None:
    released: list[str] = []
    leases = Leases(released.append, admit_s=ADMIT_S)
    first = leases.granted(Grant("first", 2), [(_key("a"), []), (_key("b"), [])], 8_000, 1_000)
    for lease in first:
        leases.settle(lease, 0)  # the asking turn ended: idle, open
    await asyncio.sleep(ADMIT_S / 2)
    second = leases.granted(Grant("second", 1), [(_key("c"), [])], 8_000, 1_000)
    leases.settle(second[0], 0)
    assert leases.has_room(_key("a"), 1_000) and leases.has_room(_key("c"), 1_000)
    await asyncio.sleep(ADMIT_S * 0.75)  # the first grant's time is up, not the second's
    assert released == ["first"]
    assert not leases.has_room(_key("a"), 1_000) and leases.take(_key("b"), 1_000) is None
    assert leases.has_room(_key("c"), 1_000)
    await asyncio.sleep(ADMIT_S / 2)
    assert released == ["first", "second"]
    assert not leases.has_room(_key("c"), 1_000)


async def test_a_lease_that_ended_early_is_released_once_and_its_successor_keeps_its_own_time() -> None:
    released: list[str] = []
    leases = Leases(released.append, admit_s=ADMIT_S)
    old = leases.granted(Grant("old"), [(_key("a"), [])], 8_000, 1_000)
    await asyncio.sleep(ADMIT_S / 2)
    new = leases.granted(Grant("new"), [(_key("a"), [])], 8_000, 1_000)  # replaces it: the old one admits no more
    leases.settle(old[0], 0)
    assert released == ["old"]
    leases.settle(new[0], 0)
    await asyncio.sleep(ADMIT_S * 0.75)  # the old one's time is up: nothing more of it, the new one still admits
    assert released == ["old"] and leases.has_room(_key("a"), 1_000)
    await asyncio.sleep(ADMIT_S / 2)
    assert released == ["old", "new"]


async def test_a_lease_with_a_turn_running_at_its_time_ends_with_that_turn() -> None:
    released: list[str] = []
    leases = Leases(released.append, admit_s=ADMIT_S)
    (lease,) = leases.granted(Grant("g"), [(_key("a"), [])], 8_000, 1_000)  # its asking turn still runs
    await asyncio.sleep(ADMIT_S * 1.5)
    assert released == [] and not leases.has_room(_key("a"), 1_000)
    leases.settle(lease, 0)
    assert released == ["g"]


async def test_closing_ends_every_lease_and_the_timer() -> None:
    released: list[str] = []
    leases = Leases(released.append, admit_s=ADMIT_S)
    (lease,) = leases.granted(Grant("g"), [(_key("a"), [])], 8_000, 1_000)
    leases.settle(lease, 0)
    leases.close()
    assert released == ["g"]
    await asyncio.sleep(ADMIT_S * 1.5)
    assert released == ["g"]


def test_the_parts_without_room_and_the_turns_a_lease_for_them_holds() -> None:
    now, released = [0.0], list[str]()
    leases = Leases(released.append, monotonic=lambda: now[0])
    roomy, spent, old, none = _key("roomy"), _key("spent"), _key("old"), _key("none")
    leases.granted(Grant("g1"), [(roomy, []), (spent, [])], 8_000, 1_000)
    assert leases.take(spent, 7_000) is not None  # 8_000 of 8_000 committed
    now[0] = 10.0
    leases.granted(Grant("g2"), [(old, [])], 8_000, 1_000)
    now[0] = 35.0  # g1's time is up, not g2's
    assert leases.without_room([roomy, spent, old, none], 1_000) == [roomy, spent, none]
    now[0] = 12.0
    assert leases.without_room([roomy, spent, old, none], 1_000) == [spent, none]
    assert [leases.has_room(k, 1_000) for k in (roomy, spent, old, none)] == [True, False, True, False]
    assert leases.lease_turns([roomy, none]) == 8
    assert leases.take(spent, 1_000) is None  # spent within its window: its next lease holds twice as many
    assert leases.lease_turns([spent]) == 16 and leases.lease_turns([spent, none]) == 8
    leases.refused(none)  # near a limit: not worth asking for a while
    assert leases.lease_turns([spent, none]) == 0 and leases.lease_turns([spent]) == 16
    now[0] += 31.0
    assert leases.lease_turns([spent, none]) == 8


def test_a_part_spent_before_its_time_ends_its_grants_other_parts_and_the_grant_goes_once_their_turns_end() -> None:
    """A grant holds its tokens in every part's scopes until all its parts end: an agent's part spent early must not
    stay reserved (on top of its turns' usage) because a person's part of the same grant sits idle."""
    released: list[str] = []
    leases = Leases(released.append, monotonic=lambda: 0.0)
    person, agent = _key("person"), _key("agent")
    first_person, first_agent = leases.granted(Grant("g", 2), [(person, []), (agent, [])], 2_000, 1_000)
    leases.settle(first_agent, 0)  # the asking turn: still running on the person's part only
    assert leases.take(agent, 1_000) is first_agent  # another person's turn: the agent's part is now full
    assert leases.take(agent, 1_000) is None  # spent within its window: ended, and the person's part with it
    assert not leases.has_room(person, 1_000) and leases.take(person, 1_000) is None
    assert released == []  # turns still run on both parts
    leases.settle(first_person, 0)
    assert released == []
    leases.settle(first_agent, 0)  # the other person's turn ends: the grant goes, once
    assert released == ["g"]
    leases.close()
    assert released == ["g"]
