"""The SQLite backend: writes inline on the event loop, grouped; the WAL checkpointed aside.

SQLite runs in WAL mode and starts write transactions with ``BEGIN IMMEDIATE`` so two writers
never deadlock on a lock upgrade. Its writes run on the event loop's thread and the writes of
one turn of the loop commit together (:meth:`SqliteTransactor.write`), each group under the
writer lock the gateway's processes on one database share (``writerlock.py``: a process that
waits for another's commit waits in the kernel, not in SQLite's sleeping busy handler); its
WAL is checkpointed in the background (:meth:`SqliteTransactor._start_checkpoint`). Reads run
on worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple, cast

import anyio
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from gateway.errors import StoreError
from gateway.settings import make_directory
from gateway.store.sql import Abort, Db, Dialect
from gateway.store.transactor import Committed, Finished, Outcome, Pooled, quietly, unavailable
from gateway.store.writerlock import WriterLock

log = logging.getLogger("toolgate.store")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
CHECKPOINT_EVERY = 200
"""Inline SQLite commits between two WAL checkpoints (each commits a few pages; SQLite's own
automatic checkpoint, off on the inline connection, would come every 1,000 pages)."""
RESTART_FRAMES = 65_536
"""WAL frames (128 MiB) past which a checkpoint also restarts the log: docs/performance.md."""
CHECKPOINT_WAIT_MS = 20
"""How long a RESTART waits for other connections (readers of the log, another process's
writer) before giving up until the next checkpoint: this process's writes wait meanwhile, and
at 80 % load a long pause takes many times its length to drain (a passive checkpoint never
waits)."""
CAREFUL_AFTER_FAILURE = 8
"""Group commits run with savepoints from the start after one had to be run again (writes
that fail come in runs: a lock busy for one call is busy for the next)."""
SQLITE_PAGE_SIZE = 2048
"""Page size of a new database (an existing one keeps its own): docs/performance.md."""


POOL_SIZE = 8
"""Idle connections the pool keeps for reads and contended writes (more are opened under load
and closed when returned)."""
CONNECTIONS_AT_MOST_IDLE = POOL_SIZE + 2
"""Connections a process holds to its database with no transaction running: the pool's, the
inline writer's and the checkpointer's (each opened on first use). The soak checks it."""


def make_engine(url: str) -> Engine:
    """A synchronous engine (pool and schema) with the pragmas the store needs."""
    path = url.split("///", 1)[-1]
    if path and path != ":memory:":
        make_directory(Path(path).parent, "database_url")
    engine = sa.create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        pool_size=POOL_SIZE,
        max_overflow=32,
    )
    sa.event.listen(engine, "connect", _sqlite_connect)
    sa.event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
    cursor = dbapi_connection.cursor()
    # Only takes effect on a database with no table yet, and only before it enters WAL mode.
    cursor.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    # Only the schema set-up goes through SQLAlchemy connections.
    conn.exec_driver_sql("BEGIN IMMEDIATE")


_Write = tuple[Callable[..., Any], tuple[Any, ...], Committed]


class SqliteTransactor(Pooled):
    """Group commit on the loop's thread; reads and contended writes on worker threads."""

    def __init__(self, url: str) -> None:
        engine = make_engine(url)
        dialect = Dialect.of("sqlite", engine.dialect.loaded_dbapi, paramstyle="qmark")
        super().__init__(engine, dialect, begin=("BEGIN DEFERRED", "BEGIN IMMEDIATE"))
        self._driver_error = self.dialect.driver_error
        self._integrity_error = self.dialect.integrity_error
        # SQLite has one writer at a time. Threads of this process that race for its lock
        # fall into SQLite's busy handler, which sleeps in whole milliseconds: so this
        # process queues its own write transactions and only other processes contend.
        self._writers: anyio.CapacityLimiter | None = None  # made in the loop, on first use
        # Writes run on the caller's thread (the event loop) when the database's write lock
        # is free: see write.
        self._inline: Any = None
        self._inline_db: Db | None = None
        self._inline_lock = threading.Lock()
        self._batch: list[_Write] = []
        # ... under the writer lock shared with the other processes on this database; while
        # another holds it, a thread waits for it and the writes queue (_flush).
        self._writer = WriterLock(self.engine.url.database)
        self._waiting: asyncio.Future[None] | None = None
        self._careful = 0  # group commits left to run with savepoints (_run_batch)
        # ... and their WAL is checkpointed on a thread of its own, not by the commit that
        # crosses SQLite's threshold (copying pages back and an fsync, on the loop).
        self._commits_since_checkpoint = 0
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._checkpoint_conn: Any = None

    async def write(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        """Run ``fn(db, *args)`` in a write transaction.

        On the event loop's thread, with a connection that never waits for the write lock,
        and grouped: the writes queued during one turn of the loop commit together (_flush).
        A thread hop costs about 0.1 ms of CPU, more than a whole short transaction, and
        writes are serial anyway (one writer per database, and the GIL). When another
        connection holds the writer lock (another process's group commit, this one's WAL
        restart), the writes queue until a thread that waits for the lock hands it over
        (_flush); when a connection outside that lock holds SQLite's (a tool, a transaction
        of this process on a worker thread), the transaction goes to a worker thread that
        waits for it.
        """
        loop = asyncio.get_running_loop()
        future = Committed(loop=loop)
        self._batch.append((fn, args, future))
        if len(self._batch) == 1 and self._waiting is None:
            loop.call_soon(self._flush)
        kind, value = await future  # uncancellable: it commits, awaited or not
        if kind is Outcome.OK:
            if self._commits_since_checkpoint >= CHECKPOINT_EVERY:
                self._start_checkpoint()
            return cast(T, value)
        if kind is Outcome.ERROR:
            raise value
        if self._writers is None:  # BUSY: another connection has the write lock
            self._writers = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(
            partial(self._pool.transaction, fn, True, *args), limiter=self._writers
        )

    def _flush(self) -> None:
        """Group commit: run the write transactions queued during this turn of the event
        loop as one SQLite transaction and commit them together (one that fails or aborts
        rolls back alone: _run_batch). Every queued caller learns its outcome only after
        the COMMIT.

        Under the writer lock: when another holder has it, a thread waits for it
        (_wait_for_writer) and this flush runs when it is ours, with every write queued
        meanwhile."""
        if not self._writer.try_acquire():
            loop = asyncio.get_running_loop()
            self._waiting = loop.run_in_executor(None, self._wait_for_writer, loop)
            return
        self._waiting = None
        try:
            batch, self._batch = self._batch, []
            timed = self.timer
            if timed is None:
                outcomes = self._run_batch(batch)
            else:
                outcomes = timed(batch[0][0], self._run_batch, batch)
        finally:
            self._writer.release()
        if (sizes := self._batch_observer) is not None:
            sizes(len(batch))
        for (_, _, future), outcome in zip(batch, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)

    def _wait_for_writer(self, loop: asyncio.AbstractEventLoop) -> None:
        """On a worker thread: wait until the writer lock is ours, then flush on the loop
        (whose ``try_acquire`` finds it held already: a lock belongs to the open file)."""
        try:
            self._writer.acquire()
        finally:
            loop.call_soon_threadsafe(self._flush)

    def _run_batch(self, batch: list[_Write]) -> list[Finished]:
        """First without savepoints (two statements a write, and the pages each write
        touches copied to the statement journal); if a write that changed rows fails or
        aborts, the transaction is rolled back and the batch run again with a savepoint per
        write, and so are the next CAREFUL_AFTER_FAILURE batches (as PostgreSQL's group
        commit does). A write that fails having changed no row (a busy lock, a lost race
        seen by a read) needs nothing rolled back: the others go on."""
        if not self._inline_lock.acquire(blocking=False):  # another thread is using it
            return [(Outcome.BUSY, None)] * len(batch)
        try:
            careful = self._careful > 0
            self._careful = max(self._careful - 1, 0)
            outcomes = self._in_transaction(batch, careful)
            if outcomes is None:
                self._careful = CAREFUL_AFTER_FAILURE
                outcomes = self._in_transaction(batch, True)
            assert outcomes is not None
            return outcomes
        finally:
            self._inline_lock.release()

    def _in_transaction(self, batch: list[_Write], careful: bool) -> list[Finished] | None:
        """BEGIN IMMEDIATE; each write (``careful``: each of several in a savepoint of its
        own); COMMIT. None when a write that changed rows failed and it was not careful
        (everything is rolled back)."""
        try:
            db = self._inline_connection()
            raw, steps = db.raw, db.steps
            steps.execute("BEGIN IMMEDIATE")
        except StoreError as exc:
            return [(Outcome.ERROR, exc)] * len(batch)
        except self._driver_error as exc:
            if getattr(exc, "sqlite_errorcode", None) in (_SQLITE_BUSY, _SQLITE_LOCKED):
                return [(Outcome.BUSY, None)] * len(batch)
            self._drop_inline()
            return [(Outcome.ERROR, unavailable(exc))] * len(batch)
        savepoints = careful and len(batch) > 1
        outcomes: list[Finished] = []
        try:
            for fn, args, _ in batch:
                if savepoints:
                    steps.execute("SAVEPOINT w")
                changes = raw.total_changes  # rows changed by this connection so far
                try:
                    outcomes.append((Outcome.OK, fn(db, *args)))
                    if savepoints:
                        steps.execute("RELEASE w")
                    continue
                except Abort as abort:
                    outcomes.append((Outcome.OK, abort.value))
                except self._integrity_error as exc:
                    outcomes.append((Outcome.ERROR, exc))
                except self._driver_error:
                    raise  # the connection may be broken: the whole batch fails
                except Exception as exc:
                    outcomes.append((Outcome.ERROR, exc))
                if savepoints:
                    steps.execute("ROLLBACK TO w")
                    steps.execute("RELEASE w")
                elif raw.total_changes != changes:  # it wrote, then failed: undo it all
                    raw.rollback()
                    return outcomes if len(batch) == 1 else None
            raw.commit()
        except self._driver_error as exc:
            quietly(raw.rollback)
            self._drop_inline()
            return [(Outcome.ERROR, unavailable(exc))] * len(batch)
        self._commits_since_checkpoint += 1
        return outcomes

    async def read(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        return await anyio.to_thread.run_sync(partial(self._pool.transaction, fn, False, *args))

    async def read_quick(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        """On the event loop, on the connection the writes use (a thread hop costs more than
        such a read), each statement its own snapshot; if that connection is busy or fails,
        like ``read``."""
        if self._inline_lock.acquire(blocking=False):
            try:
                db = self._inline_connection()
                timed = self.timer
                return fn(db, *args) if timed is None else timed(fn, fn, db, *args)
            except (StoreError, self._driver_error):
                pass  # busy or broken: the pooled path reports what is really wrong
            finally:
                self._inline_lock.release()
        return await self.read(fn, *args)

    def _inline_connection(self) -> Db:
        db = self._inline_db
        if db is None:
            try:
                proxy = self.engine.raw_connection()
            except (SQLAlchemyError, self._driver_error) as exc:
                raise unavailable(exc) from exc
            raw: Any = proxy.driver_connection
            proxy.detach()  # ours for good; closed by aclose
            raw.execute("PRAGMA busy_timeout=0")
            raw.execute("PRAGMA wal_autocheckpoint=0")  # see _start_checkpoint
            self._inline = raw
            db = self._inline_db = Db(raw, self.dialect, steps=raw.cursor())
        return db

    def _drop_inline(self) -> None:
        raw, self._inline, self._inline_db = self._inline, None, None
        if raw is not None:
            quietly(raw.close)

    # -- checkpoints ----------------------------------------------------------------------

    def _start_checkpoint(self) -> None:
        """Checkpoint the WAL in the background (SQLite's automatic checkpoint is off on the
        inline connection: it would copy pages back and fsync on the loop).

        PASSIVE, on a worker thread, alongside the writes: it copies almost every frame.
        That alone never lets the log be reused under steady writes (frames keep arriving
        behind it), so once the log holds RESTART_FRAMES frames, also RESTART, which takes
        the write lock to copy the few frames left and start the log over: it holds the
        writer lock meanwhile, so the writes of this process and of the others queue behind
        it (no busy-handler sleeps) and go on inline after it."""
        if self._checkpoint_task is not None and not self._checkpoint_task.done():
            return
        self._commits_since_checkpoint = 0
        self._checkpoint_task = asyncio.get_running_loop().create_task(self._checkpoint())

    async def _checkpoint(self) -> None:
        try:
            frames = await anyio.to_thread.run_sync(self._run_checkpoint, "PASSIVE")
            if frames < RESTART_FRAMES:
                return
            # Once more without stopping anyone: what arrived during the first pass, so that
            # the restart, while writes wait, has only a few frames left to copy.
            await anyio.to_thread.run_sync(self._run_checkpoint, "PASSIVE")
            await anyio.to_thread.run_sync(self._restart)
        except Exception as exc:  # the next one will try again
            log.warning("WAL checkpoint failed: %s", exc)

    def _restart(self) -> None:
        """RESTART under the writer lock, held on a file of its own (so this process's
        inline writes queue behind it as another process's would)."""
        lock = WriterLock(self.engine.url.database)
        try:
            lock.acquire()
            self._run_checkpoint("RESTART")
        finally:
            lock.close()

    def _run_checkpoint(self, mode: str) -> int:
        """Run one checkpoint; the number of frames in the log (SQLite's answer)."""
        raw: Any = self._checkpoint_conn
        if raw is None:
            proxy = self.engine.raw_connection()
            raw = proxy.driver_connection
            proxy.detach()
            # Readers may pin the log: a RESTART gives up quickly and tries next time.
            raw.execute(f"PRAGMA busy_timeout={CHECKPOINT_WAIT_MS}")
            self._checkpoint_conn = raw
        row = raw.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        return int(row[1]) if row and row[1] is not None else 0

    async def aclose(self) -> None:
        if self._waiting is not None:  # the writes queued behind another holder commit first
            await self._waiting
            await asyncio.sleep(0)  # the flush it scheduled
        with self._inline_lock:
            self._drop_inline()
        if self._checkpoint_task is not None:
            await self._checkpoint_task
        if self._checkpoint_conn is not None:
            quietly(self._checkpoint_conn.close)
            self._checkpoint_conn = None
        self._writer.close()
        await anyio.to_thread.run_sync(self.engine.dispose)
