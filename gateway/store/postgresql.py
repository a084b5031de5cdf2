"""The PostgreSQL backend: group commit on a writer thread, reads on reader threads.

Each thread of the store holds one psycopg connection of its own for good (a *lane*): no
pool check-out, and the driver's prepared statements stay warm. The event loop hands a
transaction to a lane through a queue and is woken once per batch the lane ran, not once per
transaction; a worker-thread hop per transaction cost more CPU than the transaction itself.

- **Writes** go to the writer lane. The writes queued while the lane was busy commit together
  (as SQLite's group commit does: one that fails or aborts rolls back alone, in a savepoint
  of its own: :meth:`PostgresTransactor._group`), so concurrent calls share one COMMIT and
  its WAL flush.
- **Reads** go to READERS reader lanes, in autocommit: under READ COMMITTED every statement
  of a read transaction has a snapshot of its own anyway, so BEGIN and COMMIT bought nothing.

Transaction-scoped advisory locks (``pg_advisory_xact_lock``) serialise per-key work across
sessions, so several gateway processes can share one database. In a batch they are held
until its COMMIT; two processes' batches that take the same keys in opposite orders deadlock,
PostgreSQL cancels one statement, and that write is rolled back to its savepoint and run
again alone after the batch commits (``RETRY_STATES``). docs/deploy.md, "PostgreSQL".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar, TypeVarTuple, cast

import anyio
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from gateway.errors import StoreError
from gateway.store.sql import Abort, Db, Dialect, LockWait
from gateway.store.transactor import Committed, Finished, Outcome, Pooled, quietly, unavailable

log = logging.getLogger("toolgate.store")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

READERS = 2
"""Reader lanes (threads, each with a connection): two keep a slow read (a long event log)
from holding up the quick ones behind it."""
MAX_BATCH = 32
"""Writes per group commit at most. Each write's savepoint that changes rows takes a
subtransaction id, and a transaction with more than 64 of them makes every other session's
snapshots slower (PostgreSQL's subxid cache overflows)."""
MAX_READS = 8
"""Reads a reader lane takes from the queue at once (the rest go to the other lanes)."""
RETRY_STATES = frozenset({"40P01", "40001", "55P03"})
"""SQLSTATEs after which a write of a batch is run again alone: deadlock detected,
serialization failure, lock not available."""
RETRIES = 3
"""Runs of a lone write that keeps meeting a deadlock before it is reported unavailable."""
CAREFUL_AFTER_FAILURE = 8
"""Batches of a lane run with savepoints from the start after one had to be run again."""
WRITERS = 1
"""Writer lanes, taking batches from one queue. One: two lanes of one process fought over
the keys their batches share (every read of one file takes its shared lock), so a batch's
second write kept finding the key's advisory lock held by the other lane's open batch, was
put off, and the lane's next batches ran with savepoints (measured, scenario 1 at 16 calls
at a time: 96 % of batches careful with two lanes, 3 % with one; batches of 3.4 writes
against 7.7; CPU per call 1.7-1.8 ms against 2.0-3.0 in the gateway, 0.6 against 1.1-1.6
in PostgreSQL). A lane waiting for its COMMIT's flush lets the queue fill, and the next
batch is the bigger."""

_Job = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Finished]"]


class _Lost(Exception):
    """The lane's connection broke before COMMIT: nothing of the batch was committed."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Session:
    """The connection as :class:`Db` sees it, with one cursor reused for every statement
    (a fresh cursor per statement costs about a fifth of a short statement)."""

    __slots__ = ("cursor", "execute")

    def __init__(self, conn: Any) -> None:
        self.execute = conn.cursor().execute  # returns the cursor: fetchone, rowcount
        self.cursor = conn.cursor


_Run = Callable[["_Lane", list[_Job]], list[Finished]]


class _Lane:
    """One thread and its connection, serving jobs from a queue (shared by lanes of a kind):
    ``run`` runs a batch of at most ``limit`` jobs."""

    def __init__(
        self,
        owner: PostgresTransactor,
        jobs: queue.SimpleQueue[_Job | None],
        name: str,
        run: _Run,
        limit: int,
    ) -> None:
        self.owner, self.jobs, self.run, self.limit = owner, jobs, run, limit
        self.again: list[_Job] = []
        self.careful = 0
        """Batches left to run with savepoints from the start (see _group)."""
        self.conn: Any = None
        self.db: Db | None = None
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def _serve(self) -> None:
        jobs, limit, stop = self.jobs, self.limit, False
        while not stop:
            if self.again:  # a write put off by the last batch, alone
                batch = [self.again.pop(0)]
            else:
                first = jobs.get()
                if first is None:
                    break
                batch = [first]
                while len(batch) < limit:
                    try:
                        job = jobs.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        stop = True
                        break
                    batch.append(job)
            self._answer(batch)
        while self.again:  # closing: what was put off still runs
            self._answer([self.again.pop(0)])
        self.close()

    def _answer(self, batch: list[_Job]) -> None:
        try:
            outcomes = self.run(self, batch)
        except BaseException as exc:  # never leave a caller waiting
            log.exception("store thread %s failed", self.thread.name)
            outcomes = [(Outcome.ERROR, unavailable(exc))] * len(batch)
        _deliver(batch, outcomes)

    # -- the connection -------------------------------------------------------------------

    def session(self) -> Db:
        db = self.db
        if db is None:
            try:
                proxy = self.owner.engine.raw_connection()
            except (SQLAlchemyError, self.owner.dialect.driver_error) as exc:
                raise unavailable(exc) from exc
            conn: Any = proxy.driver_connection
            proxy.detach()  # the lane's for good; closed by close()
            conn.autocommit = True  # BEGIN and COMMIT are ours to send
            self.conn = conn
            db = self.db = Db(_Session(conn), self.owner.dialect)
        return db

    def broken(self) -> bool:
        conn = self.conn
        return conn is None or bool(conn.closed or conn.broken)

    def close(self) -> None:
        conn, self.conn, self.db = self.conn, None, None
        if conn is not None:
            quietly(conn.close)

    # -- reads ----------------------------------------------------------------------------

    def run_reads(self, batch: list[_Job]) -> list[Finished]:
        return [self._read(fn, args) for fn, args, _ in batch]

    def _read(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Finished:
        """One read, in autocommit; retried once on a connection found dead."""
        driver_error = self.owner.dialect.driver_error
        timed = self.owner.timer
        for attempt in (1, 2):
            try:
                db = self.session()
                value = fn(db, *args) if timed is None else timed(fn, fn, db, *args)
                return (Outcome.OK, value)
            except Abort as abort:
                return (Outcome.OK, abort.value)
            except StoreError as exc:
                return (Outcome.ERROR, exc)
            except driver_error as exc:
                if not self.broken():
                    return (Outcome.ERROR, unavailable(exc))
                self.close()
                if attempt == 1:
                    log.info("store connection was lost; retrying on a new one: %s", exc)
                    continue
                return (Outcome.ERROR, unavailable(exc))
            except Exception as exc:
                return (Outcome.ERROR, exc)
        raise AssertionError("unreachable")


def _deliver(batch: list[_Job], outcomes: list[Finished]) -> None:
    """Wake each caller's loop once for the whole batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Finished]]] = {}
    for (_, _, future), outcome in zip(batch, outcomes, strict=True):
        if outcome[0] is Outcome.AGAIN:  # put off: it runs alone after this batch
            continue
        by_loop.setdefault(future.get_loop(), []).append((future, outcome))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop is closed: no one waits any more
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[Any, Finished]]) -> None:
    for future, outcome in settled:
        if not future.done():
            future.set_result(outcome)


class PostgresTransactor(Pooled):
    """Group commit on a writer lane, reads on reader lanes; see the module's docstring."""

    def __init__(self, url: str) -> None:
        # The engine's pool serves only ``transaction`` (schema set-up, tools), and the
        # lanes' first connections; no pre-ping: a lane's connection found dead is replaced
        # and its work retried once (see _Lane._read and _run_writes).
        engine = sa.create_engine(url, pool_size=2, max_overflow=8)
        dialect = Dialect.of(
            "postgresql",
            engine.dialect.loaded_dbapi,
            paramstyle="format",
            advisory_lock="SELECT pg_advisory_xact_lock(%s)",
            try_advisory_lock="SELECT pg_try_advisory_xact_lock(%s)",
            skip_locked=" FOR UPDATE SKIP LOCKED",
            writing_ctes=True,
        )
        super().__init__(engine, dialect, begin=(None, None))
        self._writes: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._reads: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lanes: list[_Lane] = []
        self._started = threading.Lock()
        self._closed = False

    async def write(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        """``fn(db, *args)`` in the writer lane's next group commit. The caller learns the
        outcome only after the COMMIT, even when cancelled meanwhile (:class:`Committed`)."""
        return await self._submit(self._writes, Committed, fn, args)

    async def read(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        return await self._submit(self._reads, asyncio.Future, fn, args)

    read_quick = read

    async def _submit(
        self,
        jobs: queue.SimpleQueue[_Job | None],
        kind: type[asyncio.Future[Finished]],
        fn: Callable[..., T],
        args: tuple[Any, ...],
    ) -> T:
        if self._closed:
            raise StoreError("the execution store is closed")
        if not self._lanes:
            self._start()
        future = kind(loop=asyncio.get_running_loop())
        jobs.put((fn, args, future))
        outcome, value = await future
        if outcome is Outcome.OK:
            return cast(T, value)
        raise value

    def _start(self) -> None:
        with self._started:
            if self._lanes:
                return
            lanes = [
                _Lane(self, self._writes, f"toolgate-pg-writer-{i}", self._run_writes, MAX_BATCH)
                for i in range(WRITERS)
            ]
            lanes += [
                _Lane(self, self._reads, f"toolgate-pg-reader-{i}", _Lane.run_reads, MAX_READS)
                for i in range(READERS)
            ]
            for lane in lanes:
                lane.thread.start()
            self._lanes = lanes

    # -- group commit (on the writer lane's thread) -----------------------------------------

    def _run_writes(self, lane: _Lane, batch: list[_Job]) -> list[Finished]:
        """The batch as one transaction. A write of several that met a lock held elsewhere
        or a deadlock is put off, to run alone next (``Outcome.AGAIN``); a lone one is retried."""
        outcomes = self._commit_batch(lane, batch)
        if len(batch) > 1:
            for job, (kind, _) in zip(batch, outcomes, strict=True):
                if kind is Outcome.AGAIN:
                    lane.again.append(job)
            return outcomes
        for _ in range(RETRIES):
            if outcomes[0][0] is not Outcome.AGAIN:
                return outcomes
            outcomes = self._commit_batch(lane, batch)
        kind, value = outcomes[0]
        return [(Outcome.ERROR, unavailable(value)) if kind is Outcome.AGAIN else (kind, value)]

    def _commit_batch(self, lane: _Lane, batch: list[_Job]) -> list[Finished]:
        """Retried once on a new connection when the old one broke before COMMIT."""
        for attempt in (1, 2):
            try:
                db = lane.session()
            except StoreError as exc:
                return [(Outcome.ERROR, exc)] * len(batch)
            try:
                timed = self.timer
                if timed is None:
                    outcomes = self._group(lane, db, batch)
                else:
                    outcomes = timed(batch[0][0], self._group, lane, db, batch)
            except _Lost as lost:
                lane.close()
                if attempt == 1:
                    log.info("store connection was lost; retrying on a new one: %s", lost)
                    continue
                return [(Outcome.ERROR, unavailable(lost.cause))] * len(batch)
            if (sizes := self._batch_observer) is not None:
                sizes(len(batch))
            return outcomes
        raise AssertionError("unreachable")

    def _group(self, lane: _Lane, db: Db, batch: list[_Job]) -> list[Finished]:
        """First without savepoints (each costs a round trip); if a write of several fails or
        aborts, the whole transaction is rolled back and run again with them, and so are the
        lane's next CAREFUL_AFTER_FAILURE batches (writes that fail come in runs: a busy
        lock is busy for every call that wants it)."""
        careful = len(batch) == 1 or lane.careful > 0
        lane.careful = max(lane.careful - 1, 0)
        outcomes = self._in_transaction(lane, db, batch, careful=careful)
        if outcomes is None:
            lane.careful = CAREFUL_AFTER_FAILURE
            outcomes = self._in_transaction(lane, db, batch, careful=True)
        assert outcomes is not None
        return outcomes

    def _in_transaction(
        self, lane: _Lane, db: Db, batch: list[_Job], careful: bool
    ) -> list[Finished] | None:
        """BEGIN; each write (``careful``: in a savepoint of its own, except a lone one, which
        the transaction isolates anyway); COMMIT. None when a write failed and it was not
        careful (everything is rolled back). Control statements go by the simple query
        protocol, two to a round trip. Raises _Lost when the connection broke before the
        COMMIT was sent; a failed COMMIT fails every write (whether it took is unknown)."""
        dialect = self.dialect
        integrity_error, driver_error = dialect.integrity_error, dialect.driver_error
        conn = lane.conn
        savepoints = careful and len(batch) > 1

        def control(sql: str) -> None:
            try:
                conn.execute(sql)
            except driver_error as exc:
                raise _Lost(exc) from exc

        control("BEGIN; SAVEPOINT w" if savepoints else "BEGIN")
        outcomes: list[Finished] = []
        try:
            for i, (fn, args, _) in enumerate(batch):
                if savepoints and i:
                    control("RELEASE w; SAVEPOINT w")
                db.nowait = i > 0  # it would wait holding the locks of the writes before it
                try:
                    outcomes.append((Outcome.OK, fn(db, *args)))
                    continue
                except Abort as abort:
                    outcomes.append((Outcome.OK, abort.value))
                except LockWait as busy:
                    outcomes.append((Outcome.AGAIN, busy))
                except integrity_error as exc:
                    outcomes.append((Outcome.ERROR, exc))
                except driver_error as exc:
                    if lane.broken():
                        raise _Lost(exc) from exc
                    if getattr(exc, "sqlstate", None) in RETRY_STATES:
                        outcomes.append((Outcome.AGAIN, exc))
                    else:
                        outcomes.append((Outcome.ERROR, unavailable(exc)))
                except Exception as exc:
                    outcomes.append((Outcome.ERROR, exc))
                if not careful:
                    control("ROLLBACK")
                    return None
                control("ROLLBACK TO w" if savepoints else "ROLLBACK")
                if not savepoints:
                    return outcomes  # a lone write: nothing left to commit
        except BaseException:
            if not lane.broken():
                quietly(lambda: conn.execute("ROLLBACK"))
            raise
        try:
            conn.execute("RELEASE w; COMMIT" if savepoints else "COMMIT")
        except driver_error as exc:
            if not lane.broken():
                quietly(lambda: conn.execute("ROLLBACK"))
            lane.close()
            failed = unavailable(exc)
            return [(Outcome.ERROR, failed)] * len(batch)
        return outcomes

    async def aclose(self) -> None:
        self._closed = True
        lanes, self._lanes = self._lanes, []
        if lanes:
            for _ in range(WRITERS):
                self._writes.put(None)
            for _ in range(READERS):
                self._reads.put(None)
            for lane in lanes:
                await anyio.to_thread.run_sync(lane.thread.join)
        await anyio.to_thread.run_sync(self.engine.dispose)
