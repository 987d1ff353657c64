"""KeyedLock: one holder per key in arrival order, different keys in parallel, memory only for busy keys."""

from __future__ import annotations

import asyncio
import random

from channels.toolkit.order import KeyedLock


async def test_many_chats_at_once_keep_per_chat_order_and_run_in_parallel() -> None:
    order = KeyedLock()
    chats, per_chat = 20, 10
    release = asyncio.Event()
    inside: set[str] = set()
    most_inside = 0
    seen: dict[str, list[int]] = {f"chat-{c}": [] for c in range(chats)}
    rng = random.Random(7)

    async def message(chat: str, n: int) -> None:
        nonlocal most_inside
        async with order.hold(chat):
            assert chat not in inside  # one holder per chat at a time
            inside.add(chat)
            most_inside = max(most_inside, len(inside))
            await release.wait()
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)  # uneven steps: later holders of other chats overtake
            seen[chat].append(n)
            inside.discard(chat)

    tasks = [asyncio.create_task(message(f"chat-{c}", n)) for n in range(per_chat) for c in range(chats)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(order) == chats
    release.set()
    await asyncio.gather(*tasks)
    assert all(got == list(range(per_chat)) for got in seen.values())
    assert most_inside == chats  # every chat's first message was in at the same moment
    assert len(order) == 0


async def test_a_free_key_is_taken_without_suspending() -> None:
    order = KeyedLock()
    other_ran = False

    async def other() -> None:
        nonlocal other_ran
        other_ran = True

    task = asyncio.create_task(other())
    async with order.hold("k"):
        assert not other_ran  # no await happened on the way in
    await task


async def test_a_cancelled_waiter_leaves_the_order_intact() -> None:
    order = KeyedLock()
    first_in = asyncio.Event()
    release = asyncio.Event()
    got: list[str] = []

    async def holder(name: str, hold: bool) -> None:
        async with order.hold("k"):
            got.append(name)
            if hold:
                first_in.set()
                await release.wait()

    first = asyncio.create_task(holder("first", True))
    await first_in.wait()
    doomed = asyncio.create_task(holder("doomed", False))
    third = asyncio.create_task(holder("third", False))
    await asyncio.sleep(0)
    doomed.cancel()
    release.set()
    await asyncio.gather(first, third, return_exceptions=True)
    assert doomed.cancelled()
    assert got == ["first", "third"]
    assert len(order) == 0
