"""The store on real SQLite and real PostgreSQL: reservation, idempotency, locks, commit."""

from __future__ import annotations

import time
from pathlib import Path
from unittest.mock import ANY

import anyio
import pytest

from gateway.events.model import make_event
from gateway.store import events as event_log
from gateway.store import keys, sqlite
from gateway.store.records import (
    ApprovalRecord,
    ExecutionRecord,
    Existing,
    IdempotencyClaim,
    LockBusy,
    LockRequest,
    Reserved,
)
from gateway.store.sql import Abort, Db
from gateway.store.store import Store
from gateway.store.tables import SCHEMA_VERSION
from gateway.types import LockMode, Status
from tests.helpers import until

pytestmark = pytest.mark.anyio


def record(ex_id: str, call_id: str = "c1", payload: str = "p1", **kw: object) -> ExecutionRecord:
    now = int(time.time() * 1000)
    base = ExecutionRecord(
        id=ex_id,
        principal="alice",
        agent_id="a",
        run_id="r1",
        turn_id="t1",
        call_id=call_id,
        payload_sha256=payload,
        workspace_id="demo",
        tool_name="fs.write_file",
        tool_version="1.2.0",
        risk="medium",
        status=Status.RUNNING,
        outcome=None,
        arguments_sha256="args",
        idempotency_scope=None,
        approval_id=None,
        cancellation_token=None,
        request_json="{}",
        result_json=None,
        fencing_json=None,
        owner=None,
        created_ms=now,
        updated_ms=now,
    )
    return base._replace(**kw)  # type: ignore[arg-type]


def claim(scope: str = "s1", args: str = "args") -> IdempotencyClaim:
    return IdempotencyClaim(scope, args, "1.2.0", int(time.time() * 1000) + 60_000)


async def test_reserve_then_commit(store: Store) -> None:
    events = [make_event("ex1", 0, "tool.requested", {"a": 1})]
    assert isinstance(await store.reserve(record("ex1"), events, None), Reserved)
    await store.commit(
        "ex1",
        outcome="succeeded",
        result_json='{"x":1}',
        events=[make_event("ex1", 1, "tool.completed", {})],
        fencing_json=None,
    )
    got = await store.get_execution("ex1")
    assert got is not None and got.status is Status.COMPLETED and got.result == {"x": 1}
    assert [e.type for e in await store.events("ex1")] == ["tool.requested", "tool.completed"]


async def test_events_applied_twice_change_nothing(store: Store) -> None:
    await store.reserve(record("ex1"), [], None)
    event = make_event("ex1", 0, "tool.started", {})
    await store.append("ex1", [event])
    await store.append("ex1", [event])
    assert len(await store.events("ex1")) == 1


async def test_events_of_types_reads_many_executions_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_log, "BY_TYPE_CHUNK", 2)  # three executions: two statements
    for ex_id, call_id in (("ex1", "c1"), ("ex2", "c2"), ("ex3", "c3")):
        events = [
            make_event(ex_id, 0, "tool.requested", {}),
            make_event(ex_id, 1, "tool.started", {}),
            make_event(ex_id, 2, "tool.output", {"text": "x"}),
            make_event(ex_id, 3, "state.checkpointed", {"adapter": {"pid": 1}}),
        ]
        await store.reserve(
            record(ex_id, call_id=call_id), events[: 4 if ex_id != "ex3" else 1], None
        )
    found = await store.events_of_types(
        ["ex1", "ex2", "ex3", "ex_none"], ("tool.started", "state.checkpointed")
    )
    assert list(found) == ["ex1", "ex2", "ex3", "ex_none"]
    for ex_id in ("ex1", "ex2"):
        assert [(e.seq, e.type, e.execution_id) for e in found[ex_id]] == [
            (1, "tool.started", ex_id),
            (3, "state.checkpointed", ex_id),
        ]
        assert found[ex_id][1].data == {"adapter": {"pid": 1}}
    assert found["ex3"] == [] and found["ex_none"] == []


async def test_same_call_is_found(store: Store) -> None:
    await store.reserve(record("ex1"), [], None)
    same = await store.reserve(record("ex2"), [], None)
    assert isinstance(same, Existing) and same.record.id == "ex1" and same.same_payload
    other = await store.reserve(record("ex3", payload="p2"), [], None)
    assert isinstance(other, Existing) and not other.same_payload


async def test_idempotency_claim(store: Store) -> None:
    assert isinstance(await store.reserve(record("ex1"), [], claim()), Reserved)
    again = await store.reserve(record("ex2", call_id="c2"), [], claim())
    assert isinstance(again, Existing) and again.by == "idempotency_key" and again.same_payload
    assert not again.record.terminal
    different = await store.reserve(record("ex3", call_id="c3"), [], claim(args="other"))
    assert isinstance(different, Existing) and not different.same_payload


async def test_expired_claim_is_replaced(store: Store) -> None:
    old = IdempotencyClaim("s1", "args", "1.2.0", int(time.time() * 1000) - 1)
    await store.reserve(record("ex1"), [], old)
    assert isinstance(await store.reserve(record("ex2", call_id="c2"), [], claim()), Reserved)


async def test_a_claim_whose_execution_is_gone_is_replaced(store: Store) -> None:
    await store.reserve(record("ex1"), [], claim())

    def drop(db: Db) -> None:
        db.run("DELETE FROM executions WHERE id = ?", ("ex1",))

    await store._write(drop)
    assert isinstance(await store.reserve(record("ex2", call_id="c2"), [], claim()), Reserved)
    replay = await store.reserve(record("ex3", call_id="c3"), [], claim())
    assert isinstance(replay, Existing) and replay.record.id == "ex2"


async def test_replay_notes_are_numbered_after_the_log(store: Store) -> None:
    """Notes appended to a finished execution's log take the next numbers, in order."""
    first = record("ex1")
    await store.reserve(first, [make_event("ex1", 0, "tool.requested", {})], claim())
    note = lambda found: [make_event(found.record.id, 0, "tool.requested", {"replay": True})]  # noqa: E731
    for i in range(3):
        await store.reserve(record(f"r{i}", call_id=f"r{i}"), [], claim(), on_existing=note)
    events = await store.events("ex1")
    assert [e.seq for e in events] == [0, 1, 2, 3]
    assert [e.data.get("replay", False) for e in events] == [False, True, True, True]


async def test_concurrent_reservations_have_one_winner(store: Store) -> None:
    results: list[object] = []

    async def one(i: int) -> None:
        results.append(await store.reserve(record(f"ex{i}", call_id=f"c{i}"), [], claim()))

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(one, i)
    assert sum(isinstance(r, Reserved) for r in results) == 1
    assert sum(isinstance(r, Existing) for r in results) == 9


async def test_exclusive_lock_blocks_and_fencing_grows(store: Store) -> None:
    req = [LockRequest("k", LockMode.EXCLUSIVE)]
    first = await store.try_acquire("ex1", "c1", req, 30)
    assert first == {"k": 1}
    busy = await store.try_acquire("ex2", "c2", req, 30)
    assert isinstance(busy, LockBusy) and busy.holder_call_id == "c1"
    await store.release_locks("ex1")
    assert await store.try_acquire("ex2", "c2", req, 30) == {"k": 2}


async def test_shared_locks_coexist_but_block_exclusive(store: Store) -> None:
    shared = [LockRequest("k", LockMode.SHARED)]
    assert not isinstance(await store.try_acquire("ex1", "c1", shared, 30), LockBusy)
    assert not isinstance(await store.try_acquire("ex2", "c2", shared, 30), LockBusy)
    busy = await store.try_acquire("ex3", "c3", [LockRequest("k", LockMode.EXCLUSIVE)], 30)
    assert isinstance(busy, LockBusy)


async def test_all_or_nothing_and_lease_expiry(store: Store) -> None:
    await store.try_acquire("ex1", "c1", [LockRequest("b", LockMode.EXCLUSIVE)], 1.0)
    both = [LockRequest("a", LockMode.EXCLUSIVE), LockRequest("b", LockMode.EXCLUSIVE)]
    assert isinstance(await store.try_acquire("ex2", "c2", both, 30), LockBusy)
    # "a" must not have been kept by the failed attempt:
    assert not isinstance(
        await store.try_acquire("ex3", "c3", [LockRequest("a", LockMode.EXCLUSIVE)], 30), LockBusy
    )
    await store.release_locks("ex3")
    await anyio.sleep(1.1)  # ex1's lease on "b" has run out: a dead holder is recovered
    assert not isinstance(await store.try_acquire("ex2", "c2", both, 30), LockBusy)


async def test_commit_releases_locks_and_marks_claim(store: Store) -> None:
    await store.reserve(record("ex1"), [], claim())
    await store.try_acquire("ex1", "c1", [LockRequest("k", LockMode.EXCLUSIVE)], 30)
    await store.commit(
        "ex1", outcome="succeeded", result_json="{}", events=[], fencing_json='{"k": 1}'
    )
    assert not isinstance(
        await store.try_acquire("ex2", "c2", [LockRequest("k", LockMode.EXCLUSIVE)], 30), LockBusy
    )
    replay = await store.reserve(record("ex9", call_id="c9"), [], claim())
    assert isinstance(replay, Existing) and replay.record.terminal


async def test_schema_version_is_recorded(store: Store) -> None:
    await store.open()  # opening twice is harmless
    assert await store.ping()


async def test_events_are_numbered_in_order_across_transactions(store: Store) -> None:
    first = [make_event("ex1", 0, "tool.requested", {}), make_event("ex1", 1, "tool.resolved", {})]
    await store.reserve(record("ex1"), first, None)
    # A writer outside the flow (a cancel) numbers from what is stored, not from its own seq.
    await store.append("ex1", [make_event("ex1", 0, "tool.started", {})])
    await store.commit(
        "ex1",
        outcome="succeeded",
        result_json="{}",
        events=[make_event("ex1", 0, "tool.completed", {})],
        fencing_json=None,
    )
    events = await store.events("ex1")
    assert [(e.seq, e.type) for e in events] == [
        (0, "tool.requested"),
        (1, "tool.resolved"),
        (2, "tool.started"),
        (3, "tool.completed"),
    ]
    assert [e.seq for e in await store.events("ex1", after_seq=1)] == [2, 3]


async def test_a_write_waits_while_another_connection_holds_sqlite_write_lock(
    tmp_path: Path,
) -> None:
    """SQLite writes run on the event loop only when the write lock is free; when another
    process holds it, the write waits on a worker thread (the loop stays free) and lands."""
    import sqlite3

    path = tmp_path / "toolgate.db"
    store = Store(f"sqlite:///{path}")
    await store.open()
    await store.reserve(record("ex1"), [], None)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    done = anyio.Event()
    ticks = 0

    async def write() -> None:
        await store.set_status("ex1", [Status.RUNNING], Status.CANCELLING)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(write)
        for _ in range(10):
            await anyio.sleep(0.02)
            ticks += 1  # the loop runs while the write waits
        assert not done.is_set()
        other.execute("COMMIT")
        with anyio.fail_after(10):
            await done.wait()
    other.close()
    assert ticks == 10
    got = await store.get_execution("ex1")
    assert got is not None and got.status is Status.CANCELLING
    await store.aclose()


@pytest.mark.postgres
async def test_a_connection_the_server_dropped_is_replaced(pg_url: str) -> None:
    import psycopg

    store = Store(pg_url)
    await store.open()
    database_url = pg_url
    await store.reserve(record("ex1"), [], None)
    assert await store.get_execution("ex1") is not None  # a pooled connection now exists
    name = database_url.rsplit("/", 1)[1]
    admin_url = database_url.replace("postgresql+psycopg", "postgresql").rsplit("/", 1)[0]
    with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
            (name,),
        ).fetchone()
    assert killed is not None and killed[0] >= 1
    got = await store.get_execution("ex1")  # retried once on a new connection
    assert got is not None and got.id == "ex1"
    assert await store.set_status("ex1", [Status.RUNNING], Status.CANCELLING)
    await store.aclose()


async def test_a_store_that_cannot_be_reached_raises_store_error() -> None:
    from gateway.errors import StoreError

    store = Store("postgresql+psycopg://nobody@127.0.0.1:1/none")
    with pytest.raises(StoreError, match="unavailable"):
        await store.get_execution("ex1")
    await store.aclose()


async def test_the_wal_is_checkpointed_off_the_writing_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inline SQLite writes do not checkpoint themselves; a thread of the store does, so the
    write-ahead log stays bounded.

    The writes wait for a checkpoint that is running before they go on: how far the loop's
    writes run ahead of the checkpoint's thread depends on the machine's load (on a loaded
    one, the log passed the bound below), while what is checked here does not: without the
    store's checkpoints these writes leave a 15 MB log."""
    from gateway.store import sqlite as store_module

    monkeypatch.setattr(store_module, "RESTART_FRAMES", 500)  # restart the log early
    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 50)  # ~430 frames, under 1 MB
    writes = 600

    path = tmp_path / "toolgate.db"
    store = Store(f"sqlite:///{path}")
    await store.open()
    wal = tmp_path / "toolgate.db-wal"
    checkpoints = 0
    for i in range(writes):
        await store.reserve(record(f"ex{i}", call_id=f"c{i}"), [], None)
        checkpoint = store.transactor._checkpoint_task
        if checkpoint is not None and not checkpoint.done():
            checkpoints += 1
            await checkpoint
    assert checkpoints == writes // 50  # one every CHECKPOINT_EVERY commits, none inline
    # Unchecked, these writes leave a 15 MB log; checkpointed every CHECKPOINT_EVERY commits,
    # the log is reused from its start.
    assert wal.stat().st_size < 8 * 1024 * 1024
    await store.aclose()
    import sqlite3

    with sqlite3.connect(path) as check:  # everything written is in the database
        (count,) = check.execute("SELECT count(*) FROM executions").fetchone()
    assert count == writes


async def test_writes_queued_behind_another_process_commit_together_when_it_has_committed(
    tmp_path: Path,
) -> None:
    """Gateway processes on one SQLite file queue for its one writer on the lock file beside
    it (gateway/store/writerlock.py): while another holds it, this store's writes, arriving
    over several turns of the loop, wait (none runs a transaction of its own, none sleeps in
    SQLite's busy handler) and commit together in one group commit once it has committed."""
    import sqlite3

    from gateway.store.writerlock import WriterLock

    path = tmp_path / "toolgate.db"
    store = Store(f"sqlite:///{path}")
    await store.open()
    transactions: list[str] = []
    store.transactor.observe(lambda name, wall, cpu: transactions.append(name))
    other_lock = WriterLock(str(path))  # another gateway process, in its group commit
    other_lock.acquire()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    outcomes: dict[int, object] = {}

    async def reserve(i: int) -> None:
        outcomes[i] = await store.reserve(record(f"ex{i}", call_id=f"c{i}"), [], None)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(reserve, i)
            await anyio.sleep(0)  # each in a turn of the loop of its own
        await until(lambda: len(store.transactor._batch) == 5, "five writes queued", limit=10)
        assert transactions == [] and outcomes == {}
        other.execute("COMMIT")
        other_lock.release()
    other.close()
    other_lock.close()
    assert len(transactions) == 1  # one group commit, no write on a thread of its own
    assert all(isinstance(outcomes[i], Reserved) for i in range(5))
    for i in range(5):
        assert await store.get_execution(f"ex{i}") is not None
    await store.aclose()


async def test_writes_of_one_loop_turn_commit_together_and_fail_alone(tmp_path: Path) -> None:
    """SQLite group commit: concurrent writes share one transaction, each in a savepoint of
    its own, so one that fails rolls back alone and the others are committed."""

    store = Store(f"sqlite:///{tmp_path / 'toolgate.db'}")
    await store.open()
    before = store.transactor._commits_since_checkpoint
    outcomes: dict[int, object] = {}

    async def reserve(i: int) -> None:
        outcomes[i] = await store.reserve(record(f"ex{i}", call_id=f"c{i}"), [], None)

    def broken(db: Db) -> None:
        db.run("INSERT INTO schema_version (id, version) VALUES (2, 1)")
        raise RuntimeError("this write fails after changing something")

    async def fail() -> None:
        with pytest.raises(RuntimeError, match="this write fails"):
            await store._write(broken)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(reserve, i)
        tg.start_soon(fail)
    assert store.transactor._commits_since_checkpoint - before == 1  # one COMMIT for six writes
    assert all(isinstance(outcomes[i], Reserved) for i in range(5))
    for i in range(5):
        assert await store.get_execution(f"ex{i}") is not None
    rows = await store._read(lambda db: db.all("SELECT id FROM schema_version"))
    assert rows == [(1,)]  # the failed write's insert was rolled back, alone
    await store.aclose()


async def _one_batch(store: Store, writes: list[object]) -> list[object]:
    """Run ``writes`` (domain operations without arguments) queued in one turn of the loop;
    each one's value, or the exception it raised."""
    outcomes: list[object] = [None] * len(writes)

    async def write(i: int, fn: object) -> None:
        try:
            outcomes[i] = await store._write(fn)  # type: ignore[arg-type]
        except Exception as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        for i, fn in enumerate(writes):
            tg.start_soon(write, i, fn)
    return outcomes


async def _traced_sqlite(tmp_path: Path) -> tuple[Store, list[str]]:
    """An open SQLite store and the statements its inline connection runs, as they run."""
    store = Store(f"sqlite:///{tmp_path / 'toolgate.db'}")
    await store.open()
    statements: list[str] = []
    store.transactor._inline_connection().raw.set_trace_callback(statements.append)
    return store, statements


def _counted(runs: list[str], name: str, sql: str) -> object:
    def write(db: Db) -> str:
        runs.append(name)
        db.run(sql)
        return name

    return write


async def test_a_group_commit_runs_without_savepoints_and_one_that_wrote_nothing_fails_alone(
    tmp_path: Path,
) -> None:
    """SQLite group commit: the writes of a batch run without savepoints; one that fails or
    aborts having changed no row (a busy lock, say) needs nothing undone, the others commit,
    and nothing runs twice."""
    store, statements = await _traced_sqlite(tmp_path)
    runs: list[str] = []

    def looks_then_aborts(db: Db) -> None:
        runs.append("aborts")
        db.one("SELECT version FROM schema_version")
        raise Abort("busy")

    writes = [
        _counted(runs, "a", "INSERT INTO lock_fences (key, last_token) VALUES ('a', 1)"),
        looks_then_aborts,
        _counted(runs, "b", "INSERT INTO lock_fences (key, last_token) VALUES ('b', 1)"),
    ]
    assert await _one_batch(store, writes) == ["a", "busy", "b"]
    assert runs == ["a", "aborts", "b"]
    assert not [s for s in statements if "SAVEPOINT" in s or "ROLLBACK" in s]
    assert store.transactor._careful == 0
    rows = await store._read(lambda db: db.all("SELECT key FROM lock_fences ORDER BY key"))
    assert rows == [("a",), ("b",)]
    await store.aclose()


async def test_a_write_that_fails_after_writing_reruns_its_batch_with_savepoints(
    tmp_path: Path,
) -> None:
    """One that fails having changed rows: the transaction is rolled back and the batch run
    again, each write in a savepoint, so that write alone is undone; the next batches start
    with savepoints (failures come in runs). A lone write needs no second run."""
    store, statements = await _traced_sqlite(tmp_path)
    runs: list[str] = []

    def writes_then_fails(db: Db) -> None:
        runs.append("fails")
        db.run("INSERT INTO lock_fences (key, last_token) VALUES ('x', 1)")
        raise RuntimeError("after a write")

    writes = [
        _counted(runs, "a", "INSERT INTO lock_fences (key, last_token) VALUES ('a', 1)"),
        writes_then_fails,
        _counted(runs, "b", "INSERT INTO lock_fences (key, last_token) VALUES ('b', 1)"),
    ]
    outcomes = await _one_batch(store, writes)
    assert outcomes[0] == "a" and outcomes[2] == "b"
    assert isinstance(outcomes[1], RuntimeError)
    assert runs == ["a", "fails", "a", "fails", "b"]  # stopped at the failure, then again
    assert statements.count("SAVEPOINT w") == 3 and statements.count("ROLLBACK TO w") == 1
    assert store.transactor._careful == sqlite.CAREFUL_AFTER_FAILURE
    rows = await store._read(lambda db: db.all("SELECT key FROM lock_fences ORDER BY key"))
    assert rows == [("a",), ("b",)]

    statements.clear()
    fences = [_counted(runs, n, f"INSERT INTO lock_fences VALUES ('{n}', 1)") for n in "cd"]
    assert await _one_batch(store, fences) == ["c", "d"]
    assert statements.count("SAVEPOINT w") == 2  # careful still
    assert store.transactor._careful == sqlite.CAREFUL_AFTER_FAILURE - 1

    store.transactor._careful = 0
    runs.clear()
    with pytest.raises(RuntimeError, match="after a write"):
        await store._write(writes_then_fails)  # alone: rolled back with its transaction
    assert runs == ["fails"]
    assert store.transactor._careful == 0
    assert await store._read(lambda db: db.one("SELECT 1 FROM lock_fences WHERE key = 'x'")) is None
    await store.aclose()


@pytest.mark.parametrize("how", ["anyio scope", "task.cancel"])
async def test_a_write_cancelled_while_queued_commits_before_its_caller_sees_the_cancel(
    tmp_path: Path, how: str
) -> None:
    """A caller cancelled while its write waits for the group commit is not let go before
    the COMMIT: it never carries on (or unwinds) believing a committed write did not happen."""
    import asyncio

    store = Store(f"sqlite:///{tmp_path / 'toolgate.db'}")
    await store.open()
    seen: list[str] = []

    async def reserve() -> None:
        try:
            await store.reserve(record("ex1"), [], None)
        except BaseException:
            row = store.transactor._inline.execute("SELECT status FROM executions WHERE id = 'ex1'")
            seen.append(f"cancelled after the commit: {row.fetchone() is not None}")
            raise
        seen.append("not cancelled")

    if how == "anyio scope":
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reserve)
                await anyio.sleep(0)  # its write is queued; the flush has not run yet
                scope.cancel()
    else:
        task = asyncio.ensure_future(reserve())
        await asyncio.sleep(0)
        assert store.transactor._batch, "the write should be queued"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert seen == ["cancelled after the commit: True"]
    assert await store.get_execution("ex1") is not None
    await store.aclose()


async def test_recent_usage_counts_the_window_up_to_the_limit(store: Store) -> None:
    now = int(time.time() * 1000)
    for i, age in enumerate([90_000, 50_000, 40_000, 30_000, 20_000]):
        await store.reserve(record(f"ex{i}", call_id=f"c{i}", created_ms=now - age), [], None)
    await store.reserve(record("bob1", call_id="b1", principal="bob", created_ms=now), [], None)
    await store.reserve(record("low1", call_id="l1", risk="low", created_ms=now), [], None)
    since = now - 60_000
    assert await store.recent_usage("alice", "demo", "medium", since, 100) == (4, now - 50_000)
    # The count stops at the limit; the oldest in the window is still found.
    assert await store.recent_usage("alice", "demo", "medium", since, 2) == (2, now - 50_000)
    assert await store.recent_usage("alice", "ops", "medium", since, 100) == (0, None)
    assert await store.recent_usage("alice", "demo", "low", since, 100) == (1, now)


async def test_a_quick_read_goes_to_a_worker_thread_while_the_write_connection_is_busy(
    tmp_path: Path,
) -> None:
    import threading

    store = Store(f"sqlite:///{tmp_path / 'toolgate.db'}")
    await store.open()
    await store.reserve(record("ex1"), [], None)
    since = int(time.time() * 1000) - 60_000
    threads: list[str] = []

    def probe(db: Db) -> str:
        threads.append(threading.current_thread().name)
        return str(db.one("SELECT id FROM executions")[0])

    assert await store._read_quick(probe) == "ex1"  # on this thread (the loop's)
    with store.transactor._inline_lock:  # as a batch on another thread would hold it
        assert await store._read_quick(probe) == "ex1"
        assert await store.recent_usage("alice", "demo", "medium", since, 10) == (1, ANY)
    assert threads[0] == threading.current_thread().name
    assert threads[1] != threading.current_thread().name
    await store.aclose()


async def test_a_new_sqlite_database_has_small_pages_and_an_old_one_keeps_its_own(
    tmp_path: Path,
) -> None:
    import sqlite3

    from gateway.store.sqlite import SQLITE_PAGE_SIZE

    old = tmp_path / "old.db"
    with sqlite3.connect(old) as conn:  # made by an earlier version, with SQLite's default
        conn.execute("CREATE TABLE t (x)")
    for path, size in ((tmp_path / "new.db", SQLITE_PAGE_SIZE), (old, 4096)):
        store = Store(f"sqlite:///{path}")
        await store.open()
        await store.reserve(record("ex1"), [], None)
        await store.aclose()
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA page_size").fetchone() == (size,)
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_observe_times_each_transaction_under_its_operations_name(store: Store) -> None:
    """The timing hook (the metrics', the bench's): called after each transaction, until it is
    taken away; the thread's CPU time only when asked for (the bench's stage table)."""
    seen: list[tuple[str, float, float | None]] = []
    store.observe(lambda name, wall_s, cpu_s: seen.append((name, wall_s, cpu_s)))
    await store.reserve(record("ex1"), [], None)
    await store.get_execution("ex1")
    store.observe(lambda name, wall_s, cpu_s: seen.append((name, wall_s, cpu_s)), thread_cpu=True)
    await store.heartbeat("ex1")
    store.observe(None)
    await store.get_execution("ex1")
    assert [name for name, _, _ in seen] == ["reserve", "get_execution", "heartbeat"]
    assert all(wall_s >= 0 for _, wall_s, _ in seen)
    assert [cpu_s is None for _, _, cpu_s in seen] == [True, True, False]
    assert seen[-1][2] is not None and seen[-1][2] >= 0


async def test_queued_counts_stop_at_their_bounds_and_claims_avoid_principals(
    store: Store,
) -> None:
    now = int(time.time() * 1000)
    for i, who in enumerate(["alice", "alice", "alice", "carol"]):
        queued = record(f"q{i}", call_id=f"q{i}", principal=who, status=Status.QUEUED)
        await store.reserve(queued._replace(created_ms=now + i), [], None)
    assert await store.queued_counts("alice", 10, 10) == (3, 4)
    assert await store.queued_counts("alice", 2, 3) == (2, 3)  # each count stops at its bound
    assert await store.queued_counts("bob", 10, 10) == (0, 4)
    # the oldest queued call of a principal not avoided; the oldest of all without avoidance
    first = await store.claim_queued("me", avoid={"alice"})
    assert first is not None and first.id == "q3" and first.status is Status.RUNNING
    assert await store.claim_queued("me", avoid={"alice", "carol"}) is None
    oldest = await store.claim_queued("me")
    assert oldest is not None and oldest.id == "q0"
    assert await store.queued_counts("alice", 10, 10) == (2, 2)


async def test_pending_approvals_count_only_the_unexpired_ones_of_the_principal(
    store: Store,
) -> None:
    now = int(time.time() * 1000)
    later = now + 60_000
    parked = [("alice", later), ("alice", later), ("alice", now - 1), ("bob", later)]
    for i, (who, expires_ms) in enumerate(parked):
        await store.reserve(record(f"ap{i}", call_id=f"ap{i}", principal=who), [], None)
        approval = ApprovalRecord(
            id=f"ap_{i}",
            execution_id=f"ap{i}",
            status="pending",
            tool_name="fs.delete_file",
            tool_version="1.0.0",
            arguments_sha256="args",
            principal=who,
            workspace_id="demo",
            reasons=("needs a person",),
            arguments={},
            preview=None,
            requested_ms=now,
            expires_ms=expires_ms,
        )
        await store.checkpoint_for_approval(approval, [])
    assert await store.pending_approvals("alice", now, 10) == 2  # not the expired one
    assert await store.pending_approvals("alice", now, 1) == 1  # the count stops at its bound
    assert await store.pending_approvals("bob", now, 10) == 1
    assert await store.pending_approvals("carol", now, 10) == 0


async def test_the_inline_sqlite_connection_leaves_no_statement_open(tmp_path: Path) -> None:
    """Writes and whole reads share one kept cursor, but a ``one`` whose statement has rows
    left unread is not kept open on it: that would hold a read snapshot on the connection
    (no checkpoint could reset the log past it, and the next write would start on a stale
    snapshot)."""
    import sqlite3

    path = tmp_path / "t.db"
    store = Store(f"sqlite:///{path}")
    await store.open()
    for i in range(3):
        await store.revoke_key(f"k{i}")

    def first(db: Db) -> str:
        return str(db.one("SELECT key_id FROM revoked_keys ORDER BY key_id")[0])

    assert await store._read_quick(keys.revoked_among, ["k1", "k7"]) == {"k1"}
    assert await store._read_quick(first) == "k0"  # three rows; one read
    with sqlite3.connect(path, timeout=0.1) as other:
        busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    assert busy == 0  # no reader of this process pins the log
    await store.aclose()


def pending_approval(
    approval_id: str, execution_id: str | None = None, roles: tuple[str, ...] | None = None
) -> ApprovalRecord:
    """A pending approval of a delete by alice (as the policy stage makes one)."""
    now = int(time.time() * 1000)
    return ApprovalRecord(
        id=approval_id,
        execution_id=execution_id or f"ex_{approval_id}",
        status="pending",
        tool_name="fs.delete_file",
        tool_version="1.0.0",
        arguments_sha256="args",
        principal="alice",
        workspace_id="demo",
        reasons=("needs a person",),
        arguments={},
        preview=None,
        requested_ms=now,
        expires_ms=now + 60_000,
        approver_roles=roles,
    )


async def test_an_approval_keeps_the_approver_roles_its_decision_named(store: Store) -> None:
    named_roles = ("auditor", "admin")
    await store.checkpoint_for_approval(pending_approval("ap_named", roles=named_roles), [])
    await store.checkpoint_for_approval(pending_approval("ap_none"), [])
    await store.checkpoint_for_approval(pending_approval("ap_nobody", roles=()), [])
    named = await store.get_approval("ap_named")
    assert named is not None and named.approver_roles == named_roles
    none = await store.get_approval("ap_none")
    assert none is not None and none.approver_roles is None
    nobody = await store.get_approval("ap_nobody")
    assert nobody is not None and nobody.approver_roles == ()


async def test_a_version_2_store_is_upgraded_and_its_approvals_name_no_roles(
    database_url: str,
) -> None:
    first = Store(database_url)
    await first.open()
    await first.checkpoint_for_approval(pending_approval("ap_old"), [])

    def to_version_2(db: Db) -> None:  # what a version 2 store looks like
        db.run("ALTER TABLE approvals DROP COLUMN approver_roles_json")
        db.run("UPDATE schema_version SET version = 2")

    await first._write(to_version_2)
    await first.aclose()
    second = Store(database_url)
    await second.open()
    try:
        old = await second.get_approval("ap_old")
        assert old is not None and old.approver_roles is None
        await second.checkpoint_for_approval(pending_approval("ap_new", roles=("auditor",)), [])
        new = await second.get_approval("ap_new")
        assert new is not None and new.approver_roles == ("auditor",)
        assert await second.schema_version() == SCHEMA_VERSION
    finally:
        await second.aclose()


async def test_a_version_3_store_gains_ended_sessions_kept_until_they_expire(
    database_url: str,
) -> None:
    first = Store(database_url)
    await first.open()

    def to_version_3(db: Db) -> None:  # what a version 3 store looks like
        db.run("DROP TABLE ended_sessions")
        db.run("UPDATE schema_version SET version = 3")

    await first._write(to_version_3)
    await first.aclose()
    second = Store(database_url)
    await second.open()
    try:
        assert await second.schema_version() == SCHEMA_VERSION
        now = int(time.time() * 1000)
        assert not await second.session_ended("gone")
        await second.end_session("gone", now - 1)  # it had expired anyway
        await second.end_session("live", now + 60_000)
        assert await second.session_ended("live")
        assert not await second.session_ended("gone")  # forgotten by the next sign-out
        assert not await second.session_ended("other")
    finally:
        await second.aclose()


def _execution_indexes(db: Db) -> set[str]:
    if db.dialect.name == "sqlite":
        rows = db.all(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", ("executions",)
        )
    else:
        rows = db.all("SELECT indexname FROM pg_indexes WHERE tablename = ?", ("executions",))
    return {row[0] for row in rows}


async def test_a_version_6_store_gains_the_run_and_call_indexes(database_url: str) -> None:
    first = Store(database_url)
    await first.open()

    def to_version_6(db: Db) -> None:  # what a version 6 store looks like
        db.run("DROP INDEX ix_executions_run")
        db.run("DROP INDEX ix_executions_call")
        db.run("UPDATE schema_version SET version = 6")

    await first._write(to_version_6)
    assert not {"ix_executions_run", "ix_executions_call"} & await first._write(_execution_indexes)
    await first.aclose()
    second = Store(database_url)
    await second.open()
    try:
        assert await second.schema_version() == SCHEMA_VERSION == 7
        assert {"ix_executions_run", "ix_executions_call"} <= await second._write(
            _execution_indexes
        )
    finally:
        await second.aclose()


async def test_executions_are_found_by_run_or_call_through_an_index(tmp_path: Path) -> None:
    """An approver's lookup by run or by call, and a run's events, name no principal: each
    was a scan of every execution (``uq_execution_call`` starts with the principal)."""
    store = Store(f"sqlite:///{tmp_path / 'plan.db'}")
    await store.open()

    def plans(db: Db) -> list[str]:
        found = []
        for where, params in (("run_id = ?", ("r",)), ("call_id = ?", ("c",))):
            query = f"SELECT id FROM executions WHERE {where} ORDER BY created_ms DESC LIMIT 5"
            sql = f"EXPLAIN QUERY PLAN {query}"
            found.append(" ".join(str(row[-1]) for row in db.all(sql, params)))
        return found

    try:
        by_run, by_call = await store._write(plans)
    finally:
        await store.aclose()
    assert "USING INDEX ix_executions_run" in by_run
    assert "USING INDEX ix_executions_call" in by_call
