"""Statements per transaction on the path of every read call (scenario 1): each is a round
trip on PostgreSQL, so the lock's grant and the completed call's record are counted here, on
both backends, with the locks' and the calls' semantics checked alongside."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from gateway.audit.chains import check_chain
from gateway.events.model import make_event
from gateway.store import events as event_log
from gateway.store import executions, locks
from gateway.store.records import Existing, LockBusy, LockRequest, Reserved
from gateway.store.sql import Db
from gateway.store.store import Store
from gateway.types import LockMode
from tests.store.test_store import record

pytestmark = pytest.mark.anyio


class Counting:
    """A driver connection (or a lane's session) that keeps the statements it runs."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.statements: list[str] = []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self.statements.append(sql)
        return self.raw.execute(sql, params)

    def cursor(self) -> Any:
        self.statements.append("(many)")
        return self.raw.cursor()


def counted(fn: Callable[..., Any], into: list[Counting]) -> Callable[..., Any]:
    def run(db: Db, *args: Any) -> Any:
        counting = Counting(db.raw)
        into.append(counting)
        return fn(Db(counting, db.dialect), *args)

    return run


async def test_a_grant_takes_two_statements_on_postgresql(store: Store) -> None:
    """PostgreSQL: the advisory lock, then the expiry, the conflict check and (with nothing
    in the way) the fence with the grant, in one statement. SQLite (serial, no advisory
    lock, no writing WITHs): the first row in the way, the fence, the grant; the expiry only
    when a lease in the way ran out."""
    seen: list[Counting] = []
    grant = counted(locks.try_acquire, seen)
    shared = [LockRequest("k", LockMode.SHARED)]
    exclusive = [LockRequest("k", LockMode.EXCLUSIVE)]
    statements = 2 if store.dialect.writing_ctes else 3
    assert await store._write(grant, "ex1", "c1", shared, 1.0) == {"k": 1}
    assert len(seen[-1].statements) == statements
    assert await store._write(grant, "ex2", "c2", shared, 30) == {"k": 2}  # shared: together
    assert len(seen[-1].statements) == statements
    busy = await store._write(grant, "ex3", "c3", exclusive, 30)
    assert isinstance(busy, LockBusy) and busy.holder in {"ex1", "ex2"}
    await store.release_locks("ex2")
    await anyio.sleep(1.1)  # ex1's lease has run out: its row is no conflict, and is removed
    assert await store._write(grant, "ex3", "c3", exclusive, 30) == {"k": 3}
    rows = await store._read(lambda db: db.all('SELECT holder FROM locks WHERE "key" = ?', ("k",)))
    assert [r[0] for r in rows] == ["ex3"]
    again = await store._write(grant, "ex3", "c3", exclusive, 30)  # the holder renews its grant
    assert again == {"k": 4}
    assert await store._write(grant, "ex3", "c3", exclusive, 0.5) == {"k": 5}
    await anyio.sleep(0.6)  # its own lease ran out: renewed, never removed by its own grant
    assert await store._write(grant, "ex3", "c3", exclusive, 30) == {"k": 6}
    rows = await store._read(lambda db: db.all('SELECT holder FROM locks WHERE "key" = ?', ("k",)))
    assert [r[0] for r in rows] == ["ex3"]


async def test_an_expired_lease_in_the_way_is_removed_for_either_mode(store: Store) -> None:
    """An expired shared lease goes when another shared grant meets it (as it went before
    the grant looked for the row in its way), and an expired exclusive one stops no one,
    even with a live lease of a later end behind it."""
    shared = [LockRequest("k", LockMode.SHARED)]
    exclusive = [LockRequest("k", LockMode.EXCLUSIVE)]

    def holders(db: Db) -> list[str]:
        return [
            r[0] for r in db.all('SELECT holder FROM locks WHERE "key" = ? ORDER BY holder', ("k",))
        ]

    assert await store.try_acquire("ex1", "c1", shared, 0.5) == {"k": 1}
    await anyio.sleep(0.6)
    assert await store.try_acquire("ex2", "c2", shared, 30) == {"k": 2}
    assert await store._read(holders) == ["ex2"]  # ex1's expired row was removed
    await store.release_locks("ex2")
    assert await store.try_acquire("ex3", "c3", exclusive, 0.5) == {"k": 3}
    await anyio.sleep(0.6)
    assert await store.try_acquire("ex4", "c4", shared, 30) == {"k": 4}
    assert await store._read(holders) == ["ex4"]
    busy = await store.try_acquire("ex5", "c5", exclusive, 30)
    assert isinstance(busy, LockBusy) and busy.holder == "ex4"


async def test_a_completed_call_is_inserted_first_and_answers_as_before(store: Store) -> None:
    """A new call: the insert and the release of its locks (one statement on PostgreSQL),
    no read before. The same call again: nothing inserted, the stored one answers."""
    seen: list[Counting] = []
    insert = counted(executions.insert_completed, seen)
    assert await store.try_acquire("ex1", "c1", [LockRequest("k", LockMode.EXCLUSIVE)], 30)
    assert isinstance(await store._write(insert, record("ex1"), []), Reserved)
    assert len(seen[-1].statements) == (1 if store.dialect.writing_ctes else 2)
    free = await store.try_acquire("ex9", "c9", [LockRequest("k", LockMode.EXCLUSIVE)], 30)
    assert not isinstance(free, LockBusy)  # ex1's lock went with its record
    await store.release_locks("ex9")
    again = await store._write(insert, record("ex2"), [])
    assert isinstance(again, Existing) and again.record.id == "ex1" and again.same_payload
    other = await store._write(insert, record("ex3", payload="p2"), [])
    assert isinstance(other, Existing) and not other.same_payload
    assert await store.get_execution("ex2") is None


async def test_a_completed_read_is_recorded_in_one_statement(store: Store) -> None:
    """A read's one write (scenario 1: its execution and seven events) is one statement on
    PostgreSQL: the release of its locks, the execution, its events. On SQLite: the insert,
    the release, the events in one statement. A call already stored writes no events; more
    events than one statement takes are all written, chained in order."""
    seen: list[Counting] = []
    insert = counted(executions.insert_completed, seen)
    types = ("tool.requested", "tool.resolved", "policy.decided", "lock.acquired")
    types += ("tool.started", "tool.side_effect_observed", "tool.completed")
    read = [make_event("ex1", 0, t, {"n": i}) for i, t in enumerate(types)]
    assert isinstance(await store._write(insert, record("ex1"), read), Reserved)
    assert len(seen[-1].statements) == (1 if store.dialect.writing_ctes else 3)
    stored = await store.events("ex1")
    assert [(e.seq, e.type) for e in stored] == list(enumerate(types))
    assert check_chain(await store.audit_chain("ex1")) == []
    again = [make_event("ex2", 0, t, {}) for t in types]
    assert isinstance(await store._write(insert, record("ex2"), again), Existing)
    assert await store.events("ex2") == []
    many = event_log.ROWS_PER_INSERT + 3
    output = [make_event("ex3", 0, "tool.output", {"i": i}) for i in range(many)]
    assert isinstance(await store._write(insert, record("ex3", call_id="c3"), output), Reserved)
    assert [e.data["i"] for e in await store.events("ex3")] == list(range(many))
    assert check_chain(await store.audit_chain("ex3")) == []
