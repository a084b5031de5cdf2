"""The PostgreSQL transactor's group commit on real PostgreSQL: concurrent writes share one
COMMIT, one that fails rolls back alone, and one that would wait for a lock held elsewhere
while holding the others' is put off and runs alone once the lock is free."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator

import anyio
import pytest

from gateway.store import postgresql
from gateway.store.records import Reserved
from gateway.store.sql import Db, lock_id
from gateway.store.store import Store
from tests.store.test_store import record

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]
ROUNDS = 10


@pytest.fixture
def admin(pg_url: str) -> Iterator[object]:
    """A session of its own on the test database, holding advisory locks for a test."""
    import psycopg

    url = pg_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


async def _waiting_for(admin: object, key: str) -> None:
    """Until some session waits for the advisory lock on ``key``."""
    key_id = lock_id(key)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = admin.execute(  # type: ignore[attr-defined]
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid::bigint = %s AND objid::bigint = %s",
            (key_id >> 32, key_id & 0xFFFFFFFF),
        ).fetchone()
        if row[0]:
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"no session waited for {key}")


async def test_writes_queued_together_commit_together_and_fail_alone(
    pg_url: str, admin: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgresql, "WRITERS", 1)
    store = Store(pg_url)
    await store.open()
    sizes: list[int] = []
    store.observe_batches(sizes.append)
    admin.execute("SELECT pg_advisory_lock(%s)", (lock_id("hold"),))  # type: ignore[attr-defined]
    outcomes: dict[int, object] = {}

    async def hold() -> None:
        await store._write(lambda db: db.advisory_lock("hold"))

    async def reserve(i: int) -> None:
        outcomes[i] = await store.reserve(record(f"ex{i}", call_id=f"c{i}"), [], None)

    def broken(db: Db) -> None:
        db.run("INSERT INTO schema_version (id, version) VALUES (2, 1)")
        raise RuntimeError("this write fails after changing something")

    async def fail() -> None:
        with pytest.raises(RuntimeError, match="this write fails"):
            await store._write(broken)

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)  # the writer waits in it: the others queue up behind
        await _waiting_for(admin, "hold")
        for i in range(3):
            tg.start_soon(reserve, i)
        tg.start_soon(fail)
        for i in range(3, 5):
            tg.start_soon(reserve, i)
        await anyio.wait_all_tasks_blocked()  # each waits for its queued write's answer
        admin.execute("SELECT pg_advisory_unlock(%s)", (lock_id("hold"),))  # type: ignore[attr-defined]
    assert sizes == [1, 6]  # one COMMIT for the six queued writes
    assert all(isinstance(outcomes[i], Reserved) for i in range(5))
    for i in range(5):
        assert await store.get_execution(f"ex{i}") is not None
    rows = await store._read(lambda db: db.all("SELECT id FROM schema_version"))
    assert rows == [(1,)]  # the failed write's insert was rolled back, alone
    await store.aclose()


async def test_a_write_that_would_wait_holding_other_writes_locks_is_put_off(
    pg_url: str, admin: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgresql, "WRITERS", 1)
    store = Store(pg_url)
    await store.open()
    sizes: list[int] = []
    store.observe_batches(sizes.append)
    for key in ("hold", "busy"):
        admin.execute("SELECT pg_advisory_lock(%s)", (lock_id(key),))  # type: ignore[attr-defined]
    done: list[str] = []

    def needs_busy(db: Db) -> str:
        db.advisory_lock("busy")
        db.run("INSERT INTO schema_version (id, version) VALUES (3, 1)")
        return "locked"

    async def write_busy() -> None:
        done.append(await store._write(needs_busy))

    async def reserve(i: int) -> None:
        assert isinstance(
            await store.reserve(record(f"ex{i}", call_id=f"c{i}"), [], None), Reserved
        )
        done.append(f"ex{i}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(store._write, lambda db: db.advisory_lock("hold"))
        await _waiting_for(admin, "hold")
        tg.start_soon(reserve, 1)
        tg.start_soon(write_busy)  # second in its batch: it must not wait there
        tg.start_soon(reserve, 2)
        await anyio.wait_all_tasks_blocked()  # each waits for its queued write's answer
        admin.execute("SELECT pg_advisory_unlock(%s)", (lock_id("hold"),))  # type: ignore[attr-defined]
        await _waiting_for(admin, "busy")  # put off, alone now, it waits
        assert sorted(done) == ["ex1", "ex2"]  # the rest of its batch committed
        admin.execute("SELECT pg_advisory_unlock(%s)", (lock_id("busy"),))  # type: ignore[attr-defined]
    assert sorted(done) == ["ex1", "ex2", "locked"]
    assert sizes == [1, 3, 1]  # the held write, the batch that put one off, that one alone
    rows = await store._read(lambda db: db.all("SELECT id FROM schema_version ORDER BY id"))
    assert rows == [(1,), (3,)]
    await store.aclose()


async def test_one_process_commits_one_batch_at_a_time(pg_url: str) -> None:
    """Scenario 1's writes, 16 calls at a time on one file: no two write transactions of one
    process are open at once. (Two writer lanes each had a batch open: every read of one file
    takes its shared lock, so a batch's write kept finding the key's advisory lock held by the
    other lane's batch, was put off, and the lane's next batches ran with savepoints.)"""
    from gateway.store.records import LockRequest
    from gateway.types import LockMode

    store = Store(pg_url)
    await store.open()
    spans: list[tuple[float, float]] = []

    def seen(name: str, wall_s: float, cpu_s: float | None) -> None:
        if threading.current_thread().name.startswith("toolgate-pg-writer"):
            end = time.perf_counter()
            spans.append((end - wall_s, end))

    store.observe(seen)
    shared = [LockRequest("ws:demo:file:one-kib.txt", LockMode.SHARED)]

    async def read(k: int) -> None:
        for i in range(ROUNDS):
            ex = f"ex_{k}_{i}"
            assert await store.try_acquire(ex, f"c_{k}_{i}", shared, 30)
            await anyio.sleep(random.random() / 1000)  # the file's read: the calls drift apart
            done = record(ex, call_id=f"c_{k}_{i}")
            assert isinstance(await store.insert_completed(done, []), Reserved)

    try:
        async with anyio.create_task_group() as tg:
            for k in range(16):
                tg.start_soon(read, k)
    finally:
        await store.aclose()
    spans.sort()
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert len(spans) >= 2 and overlaps == []
