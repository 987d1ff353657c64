"""The LeaseStore contract on every backend's `Stores`: one holder at a time, renewals keep the token, a new grant
after a release raises it."""

from __future__ import annotations

from agenthub.storage.stores import Stores


async def test_a_live_lease_is_refused_to_another_holder_and_renewed_for_its_own(backend_stores: Stores) -> None:
    leases = backend_stores.leases
    first = await leases.acquire("session:a", "holder-1", ttl_s=30)
    assert first is not None and first.holder == "holder-1"
    assert await leases.acquire("session:a", "holder-2", ttl_s=30) is None
    again = await leases.acquire("session:a", "holder-1", ttl_s=30)
    assert again is not None and again.token == first.token
    assert await leases.acquire("session:b", "holder-2", ttl_s=30) is not None  # another name is another lease


async def test_a_released_lease_goes_to_the_next_holder_with_a_higher_token(backend_stores: Stores) -> None:
    leases = backend_stores.leases
    first = await leases.acquire("memory:x", "holder-1", ttl_s=30)
    assert first is not None
    await leases.release(first)
    second = await leases.acquire("memory:x", "holder-2", ttl_s=30)
    assert second is not None and second.token > first.token
    assert await leases.renew(first, 30) is None  # lost: another holder has it now
    renewed = await leases.renew(second, 60)
    assert renewed is not None and renewed.token == second.token and renewed.holder == "holder-2"
