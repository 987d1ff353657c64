"""The Inbox contract on every backend's `Stores`: an accepted message is listed until settled, in acceptance order,
and counted while unanswered."""

from __future__ import annotations

from agenthub.storage.stores import Stores


async def test_accepted_messages_are_unsettled_in_order_until_settled(backend_stores: Stores) -> None:
    inbox = backend_stores.inbox
    first = await inbox.accept("http", {"text": "你好"}, session="default:http:alice")
    second = await inbox.accept("wecom:app-1", {"text": "second"})
    assert [e.id for e in await inbox.unsettled()] == [first.id, second.id]
    assert second.seq > first.seq and (await inbox.unsettled())[0].payload == {"text": "你好"}
    assert await inbox.count() == 2
    await inbox.settle(first.id)
    assert [e.id for e in await inbox.unsettled()] == [second.id]
    assert await inbox.count() == 1


async def test_a_session_assigned_later_orders_its_entries(backend_stores: Stores) -> None:
    inbox = backend_stores.inbox
    first = await inbox.accept("wecom:app-1", {"n": 1})
    second = await inbox.accept("wecom:app-1", {"n": 2})
    await inbox.assign(first.id, "default:wecom:bob")
    await inbox.assign(second.id, "default:wecom:bob")
    assert await inbox.earlier_unsettled("default:wecom:bob", second.id) == [first.id]
    assert await inbox.still_mine(second.id)
    await inbox.settle(first.id)
    assert await inbox.earlier_unsettled("default:wecom:bob", second.id) == []
