"""The JobDocuments contract (scheduled jobs as JSON documents by agent and job id, fires recorded under a guard)
on every backend in JOB_STORE_FACTORIES."""

from __future__ import annotations

import asyncio
import json

from agenthub.scheduler.jobs import Job
from agenthub.scheduler.store import document
from agenthub.storage.jobs import FireRecord, JobDocument
from tests.support.stores import JobBackend


def _doc(job_id: str, due: float | None = 1000.0, agent: str = "default", text: str = "交周报") -> JobDocument:
    body = {"id": job_id, "agent": agent, "text": text, "next_due": due}
    return JobDocument(agent, job_id, due, json.dumps(body, ensure_ascii=False, separators=(",", ":")))


def _by_id(docs: list[JobDocument]) -> dict[str, JobDocument]:
    return {d.job_id: d for d in docs}


async def test_created_jobs_are_there_for_another_instance_in_full(job_backend: JobBackend) -> None:
    docs = [_doc("a1"), _doc("a2", None, text="提醒\u0000 😀"), _doc("b1", agent="other")]
    for doc in docs:
        await job_backend.store.put(doc)
    other = job_backend.other_instance()
    assert _by_id(await other.load_all()) == _by_id(docs)
    assert _by_id(await other.load_all("other")) == {"b1": docs[2]}
    assert await other.load_all("nobody") == []


async def test_an_update_replaces_the_job_and_a_removal_removes_only_it(job_backend: JobBackend) -> None:
    store = job_backend.store
    await store.put(_doc("a1"))
    await store.put(_doc("a2"))
    await store.put(_doc("a1", 2000.0, text="改了"))
    await store.remove("default", ["a2", "never-there"])
    assert await job_backend.other_instance().load_all() == [_doc("a1", 2000.0, text="改了")]
    await store.remove("default", [])
    assert len(await store.load_all()) == 1


async def test_16_writers_at_the_same_moment_on_one_agent_lose_nothing(job_backend: JobBackend) -> None:
    """Creates, updates and removals of one agent's jobs all at once: every change is in the store after."""
    store = job_backend.store
    for i in range(8):
        await store.put(_doc(f"old{i}"))
    start = asyncio.Event()

    async def writer(i: int) -> None:
        await start.wait()
        await store.put(_doc(f"new{i}", float(i)))
        if i < 8:
            await store.put(_doc(f"old{i}", 5000.0 + i, text=f"updated {i}"))
        elif i >= 12:
            await store.remove("default", [f"old{i - 12}"])

    writers = [asyncio.create_task(writer(i)) for i in range(16)]
    await asyncio.sleep(0)
    start.set()
    await asyncio.gather(*writers)
    stored = _by_id(await job_backend.other_instance().load_all("default"))
    expected = {f"new{i}": _doc(f"new{i}", float(i)) for i in range(16)}
    expected |= {f"old{i}": _doc(f"old{i}", 5000.0 + i, text=f"updated {i}") for i in range(8)}
    for i in range(4):  # writers 12..15 removed old0..old3, which writers 0..3 updated: either order may win
        assert f"old{i}" not in stored or stored[f"old{i}"] == expected[f"old{i}"]
        expected.pop(f"old{i}")
        stored.pop(f"old{i}", None)
    assert stored == expected


async def test_a_fire_is_recorded_only_against_the_due_time_it_was_stored_with(job_backend: JobBackend) -> None:
    store = job_backend.store
    await store.put(_doc("cron", 1000.0))
    await store.put(_doc("once", 1000.0))
    await store.put(_doc("moved", 1500.0))
    records = [
        FireRecord("default", "cron", 1000.0, _doc("cron", 2000.0)),
        FireRecord("default", "once", 1000.0, None),
        FireRecord("default", "moved", 1000.0, None),  # it was moved meanwhile: not this fire any more
        FireRecord("default", "gone", 1000.0, None),
    ]
    assert await store.record_fires(records) == [True, True, False, False]
    assert await store.record_fires(records[:2]) == [False, False]  # recorded already
    assert _by_id(await job_backend.other_instance().load_all()) == {
        "cron": _doc("cron", 2000.0),
        "moved": _doc("moved", 1500.0),
    }


async def test_the_same_fire_recorded_by_many_at_once_is_recorded_once(job_backend: JobBackend) -> None:
    """Instances (each its own pool) recording the same due time of the same jobs at the same moment: each fire
    is won by exactly one of them."""
    stores = [job_backend.store, *(job_backend.other_instance() for _ in range(3))]
    if not job_backend.store.shared:
        stores = [job_backend.store] * 4  # one process owns the files: its callers contend in it
    for i in range(5):
        await job_backend.store.put(_doc(f"j{i}", 1000.0))
    records = [FireRecord("default", f"j{i}", 1000.0, _doc(f"j{i}", 2000.0)) for i in range(5)]
    start = asyncio.Event()

    async def record(store_index: int) -> list[bool]:
        await start.wait()
        return await stores[store_index].record_fires(records)

    tasks = [asyncio.create_task(record(n % 4)) for n in range(8)]
    await asyncio.sleep(0)
    start.set()
    results = await asyncio.gather(*tasks)
    assert [sum(result[i] for result in results) for i in range(5)] == [1] * 5


async def test_a_guarded_change_is_taken_only_over_the_due_time_it_was_made_from(job_backend: JobBackend) -> None:
    store = job_backend.store
    await store.put(_doc("cron", 1000.0))
    await store.put(_doc("done", None))
    assert await store.record_fires([FireRecord("default", "cron", 1000.0, _doc("cron", 2000.0))]) == [True]
    assert not await store.put_if(_doc("cron", 1000.0, text="改了"), 1000.0)  # made from the due time that ran
    assert not await store.put_if(_doc("gone", 1000.0), 1000.0)  # never stored (or removed since): not created
    assert await store.put_if(_doc("cron", 2000.0, text="改了"), 2000.0)
    assert await store.put_if(_doc("done", None, text="改了"), None)
    assert _by_id(await job_backend.other_instance().load_all()) == {
        "cron": _doc("cron", 2000.0, text="改了"),
        "done": _doc("done", None, text="改了"),
    }


async def test_a_job_whose_text_holds_a_lone_surrogate_is_stored_and_read_back(job_backend: JobBackend) -> None:
    """Half a UTF-16 pair (the model's tool input may hold one) is no UTF-8: the job is kept with it escaped."""
    job = Job(
        "abc12345", "default", "http", "c1", "Asia/Shanghai", 1000.0, at=2000.0, text="半 \ud800 x", next_due=2000.0
    )
    await job_backend.store.put(document(job))
    (stored,) = await job_backend.other_instance().load_all()
    assert Job.from_json(json.loads(stored.text)) == job
    assert stored.text == job.json_text  # as the scheduler encodes it: no rewrite of an unchanged job
