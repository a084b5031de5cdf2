"""The store: the only module that runs queries.

Its API is async; each method runs one short transaction. PostgreSQL's run on worker threads
(one thread hop per transaction, not per statement) and serialise per-key work with
transaction-scoped advisory locks, so several gateway processes can share one database.
SQLite runs in WAL mode and starts write transactions with ``BEGIN IMMEDIATE`` so two writers
never deadlock on a lock upgrade; its writes run on the event loop's thread and the writes of
one turn of the loop commit together (``Store._write``); its WAL is checkpointed in the
background (``Store._start_checkpoint``). Reads run on worker threads.

SQLAlchemy owns the schema (``tables.py``), the URL and the connection pool; the statements
themselves are plain SQL with bound parameters run on the driver's connection. Building and
compiling SQLAlchemy Core statements cost 0.3-0.6 ms each on the benchmark machine, several
times the statement itself, and every call runs a handful of them (``docs/performance.md``).
Each statement is written once with ``?`` placeholders (:class:`Sql`); PostgreSQL's driver
gets them as ``%s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields, replace
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import SQLModel

from gateway import jsontext
from gateway.errors import StoreError
from gateway.events.model import Event
from gateway.instance import INSTANCE_ID
from gateway.store.records import (
    ApprovalRecord,
    ExecutionRecord,
    IdempotencyClaim,
    LockBusy,
    LockRequest,
)
from gateway.store.tables import (
    SCHEMA_VERSION,
    ApprovalRow,
    EventRow,
    ExecutionRow,
    IdempotencyRow,
    LockFenceRow,
    LockRow,
    SchemaVersionRow,
)
from gateway.types import LockMode, Status

log = logging.getLogger("toolgate.store")
T = TypeVar("T")
_TABLES = [
    cast(sa.Table, row.__table__)  # type: ignore[union-attr]
    for row in (
        ExecutionRow,
        EventRow,
        IdempotencyRow,
        LockRow,
        LockFenceRow,
        ApprovalRow,
        SchemaVersionRow,
    )
]


def now_ms() -> int:
    return int(time.time() * 1000)


class Sql:
    """One statement, written with ``?`` placeholders, in each driver's parameter style."""

    __slots__ = ("postgresql", "sqlite")

    def __init__(self, text: str) -> None:
        self.sqlite = " ".join(text.split())
        self.postgresql = self.sqlite.replace("?", "%s")


class Db:
    """The driver connection of one transaction (what a store method's body gets)."""

    __slots__ = ("postgresql", "raw")

    def __init__(self, raw: Any, postgresql: bool) -> None:
        self.raw, self.postgresql = raw, postgresql

    def _text(self, sql: Sql | str) -> str:
        if isinstance(sql, str):
            sql = Sql(sql)
        return sql.postgresql if self.postgresql else sql.sqlite

    def run(self, sql: Sql | str, params: Sequence[Any] = ()) -> int:
        """Execute; the number of rows changed."""
        cursor = self.raw.execute(self._text(sql), params)
        return int(cursor.rowcount)

    def one(self, sql: Sql | str, params: Sequence[Any] = ()) -> Any:
        """The first row (a tuple), or None."""
        return self.raw.execute(self._text(sql), params).fetchone()

    def all(self, sql: Sql | str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self.raw.execute(self._text(sql), params).fetchall())

    def many(self, sql: Sql | str, rows: Sequence[Sequence[Any]]) -> None:
        cursor = self.raw.cursor()
        try:
            cursor.executemany(self._text(sql), rows)
        finally:
            cursor.close()

    def advisory_lock(self, key: str) -> None:
        """Serialise work on ``key`` across PostgreSQL sessions until the transaction ends
        (SQLite needs none: its write transactions are serial)."""
        if self.postgresql:
            self.raw.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(key),))


_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
CHECKPOINT_EVERY = 200
"""Inline SQLite commits between two WAL checkpoints (each commits a few pages; SQLite's own
automatic checkpoint, off on the inline connection, would come every 1,000 pages)."""
RESTART_FRAMES = 65_536
"""Frames (pages) in the WAL (128 MiB at this store's 2 KiB pages) past which a checkpoint
also restarts the log. Below it, passive checkpoints copy frames back without stopping a
write; the restart makes this process's writes wait while it copies what is left and fsyncs,
3-15 ms on the benchmark machine, so it should be rare. Under steady writes the log is never
reused without one: at 800 reads a second (1,600 commits, about 16,000 frames) the earlier
16,384 restarted it every second, and those pauses made the p99 latency."""
CHECKPOINT_WAIT_MS = 20
"""How long a RESTART waits for other connections (readers of the log, another process's
writer) before giving up until the next checkpoint: this process's writes wait meanwhile, and
at 80 % load a long pause takes many times its length to drain (a passive checkpoint never
waits)."""


class _CommitFailed(Exception):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Abort(Exception):
    """Roll the transaction back and return ``value`` from it."""

    def __init__(self, value: object) -> None:
        super().__init__("abort")
        self.value = value


class Reserved:
    """The reservation is durable; go on."""


class Existing:
    """The call (same run_id + call_id, or same idempotency key) already has an execution."""

    def __init__(self, record: ExecutionRecord, by: str, same_payload: bool) -> None:
        self.record, self.by, self.same_payload = record, by, same_payload


class ApprovalUnavailable:
    """The approval to consume is not (or no longer) approved: used, expired or denied."""


ReserveResult = Reserved | Existing | ApprovalUnavailable

CallIdentity = tuple[str, str, str, str]
"""(principal, run_id, call_id, payload_sha256): what names one call, and what it asked."""


def call_identity(record: ExecutionRecord) -> CallIdentity:
    return (record.principal, record.run_id, record.call_id, record.payload_sha256)


def make_engine(url: str) -> Engine:
    """A synchronous engine (pool and schema) with the pragmas each backend needs."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=8,
            max_overflow=32,
        )
        sa.event.listen(engine, "connect", _sqlite_connect)
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine
    # No pre-ping (a round trip per transaction): a connection found dead is replaced and
    # its transaction retried once, see Store._tx.
    return sa.create_engine(url, pool_size=10, max_overflow=20)


SQLITE_PAGE_SIZE = 2048
"""Page size of a database this store creates (an existing one keeps its own). A commit writes
every page it changed to the WAL, whole; a call changes a few rows in each of ten or so
B-trees, so smaller pages mean less to write. Measured: a sequential fs.read_file took
580-620 us of CPU in-process with 2 KiB pages against 690-930 us with SQLite's default 4 KiB;
under wrk, 5-6 % less CPU per read or deny call and less still per write. 1 KiB pages split
the larger rows (stored results) over overflow pages and gave mixed results."""


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


def _lock_id(key: str) -> int:
    # A stable 63-bit id for pg_advisory_xact_lock (crc32 of two halves keeps it portable).
    data = key.encode("utf-8")
    return (zlib.crc32(data) << 31) ^ zlib.crc32(data[::-1])


# --- statements -------------------------------------------------------------------------------

_EXECUTION_COLUMNS = tuple(f.name for f in fields(ExecutionRecord))
_EX_COLS = ", ".join(_EXECUTION_COLUMNS)
_APPROVAL_COLUMNS = (
    "id, execution_id, status, tool_name, tool_version, arguments_sha256, principal, "
    "workspace_id, reasons_json, arguments_json, preview_json, requested_ms, expires_ms, "
    "decided_by, decided_ms, comment"
)
_SELECT_EXECUTION = f"SELECT {_EX_COLS} FROM executions"
_SELECT_APPROVAL = f"SELECT {_APPROVAL_COLUMNS} FROM approvals"

INSERT_EXECUTION = Sql(
    f"INSERT INTO executions ({_EX_COLS}) VALUES ({', '.join('?' * len(_EXECUTION_COLUMNS))})"
)
EXECUTION_BY_ID = Sql(f"{_SELECT_EXECUTION} WHERE id = ?")
EXECUTION_BY_CALL = Sql(f"{_SELECT_EXECUTION} WHERE principal = ? AND run_id = ? AND call_id = ?")
CLAIM_BY_SCOPE = Sql(
    "SELECT i.execution_id, i.arguments_sha256, i.tool_version, i.expires_ms, "
    + ", ".join(f"e.{c}" for c in _EXECUTION_COLUMNS)
    + " FROM idempotency i LEFT JOIN executions e ON e.id = i.execution_id WHERE i.scope = ?"
)
DELETE_CLAIM = Sql("DELETE FROM idempotency WHERE scope = ?")
INSERT_CLAIM = Sql(
    "INSERT INTO idempotency (scope, execution_id, arguments_sha256, tool_version, state, "
    "expires_ms) VALUES (?, ?, ?, ?, 'reserved', ?)"
)
COMMIT_CLAIM = Sql("UPDATE idempotency SET state = 'committed' WHERE execution_id = ?")
RELEASE_CLAIM = Sql("DELETE FROM idempotency WHERE execution_id = ?")
SWEEP_CLAIMS = Sql("DELETE FROM idempotency WHERE expires_ms <= ?")
SET_STATUS = Sql("UPDATE executions SET status = ?, updated_ms = ? WHERE id = ?")
HEARTBEAT = Sql("UPDATE executions SET updated_ms = ? WHERE id = ?")
COMMIT_EXECUTION = Sql(
    "UPDATE executions SET status = 'completed', outcome = ?, result_json = ?, "
    "fencing_json = ?, updated_ms = ? WHERE id = ? AND status <> 'completed'"
)
RESOLVE_OUTCOME = Sql(
    "UPDATE executions SET outcome = ?, result_json = ?, updated_ms = ? "
    "WHERE id = ? AND outcome = ?"
)
CLAIM_QUEUED_SQLITE = Sql(
    "SELECT id FROM executions WHERE status = 'queued' ORDER BY created_ms LIMIT 1"
)
CLAIM_QUEUED_PG = Sql(
    "SELECT id FROM executions WHERE status = 'queued' ORDER BY created_ms LIMIT 1 "
    "FOR UPDATE SKIP LOCKED"
)
TAKE_QUEUED = Sql(
    "UPDATE executions SET status = 'running', owner = ?, updated_ms = ? WHERE id = ?"
)
BY_CANCELLATION_TOKEN = Sql(
    f"{_SELECT_EXECUTION} WHERE principal = ? AND cancellation_token = ? AND status <> 'completed'"
)
# Both walk ix_executions_quota from the start of the window: the count stops at the limit
# (an actor far over it must not make each of its calls slower), the oldest is one row.
_IN_WINDOW = (
    "FROM executions WHERE principal = ? AND workspace_id = ? AND risk = ? AND created_ms >= ?"
)
RECENT_COUNT = Sql(f"SELECT count(*) FROM (SELECT 1 {_IN_WINDOW} LIMIT ?) AS recent")
OLDEST_RECENT = Sql(f"SELECT created_ms {_IN_WINDOW} ORDER BY created_ms LIMIT 1")
INSERT_EVENT = Sql(
    "INSERT INTO events (id, execution_id, seq, type, version, at_ms, data_json) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
)
# Numbered by the store: the next seq of the execution, counted in the same statement.
APPEND_EVENT = Sql(
    "INSERT INTO events (id, execution_id, seq, type, version, at_ms, data_json) "
    "VALUES (?, ?, (SELECT coalesce(max(seq), -1) + 1 FROM events WHERE execution_id = ?), "
    "?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
)
EVENTS_AFTER = Sql(
    "SELECT id, execution_id, seq, type, version, at_ms, data_json FROM events "
    "WHERE execution_id = ? AND seq > ? ORDER BY seq"
)
EXPIRE_LOCK = Sql('DELETE FROM locks WHERE "key" = ? AND lease_until_ms < ?')
LOCK_CONFLICT_EXCLUSIVE = Sql(
    'SELECT holder, holder_call_id FROM locks WHERE "key" = ? AND holder <> ? LIMIT 1'
)
LOCK_CONFLICT_SHARED = Sql(
    'SELECT holder, holder_call_id FROM locks WHERE "key" = ? AND holder <> ? '
    "AND mode = 'exclusive' LIMIT 1"
)
NEXT_FENCE = Sql(
    'INSERT INTO lock_fences ("key", last_token) VALUES (?, 1) ON CONFLICT ("key") '
    "DO UPDATE SET last_token = lock_fences.last_token + 1 RETURNING last_token"
)
UPSERT_LOCK = Sql(
    'INSERT INTO locks ("key", holder, holder_call_id, mode, token, lease_until_ms) '
    'VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT ("key", holder) DO UPDATE SET '
    "holder_call_id = excluded.holder_call_id, mode = excluded.mode, "
    "token = excluded.token, lease_until_ms = excluded.lease_until_ms"
)
WAITER_CANCELLED = Sql("SELECT 1 FROM executions WHERE id = ? AND status = 'cancelling'")
RENEW_LOCKS = Sql("UPDATE locks SET lease_until_ms = ? WHERE holder = ?")
RELEASE_LOCKS = Sql("DELETE FROM locks WHERE holder = ?")
INSERT_APPROVAL = Sql(f"INSERT INTO approvals ({_APPROVAL_COLUMNS}) VALUES ({', '.join('?' * 16)})")
APPROVAL_BY_ID = Sql(f"{_SELECT_APPROVAL} WHERE id = ?")
PARK_EXECUTION = Sql(
    "UPDATE executions SET status = 'awaiting_approval', approval_id = ?, updated_ms = ? "
    "WHERE id = ?"
)
SET_APPROVAL = Sql("UPDATE approvals SET status = ? WHERE id = ? AND status = ?")
DECIDE_APPROVAL = Sql(
    "UPDATE approvals SET status = ?, decided_by = ?, decided_ms = ?, comment = ? "
    "WHERE id = ? AND status = ?"
)
RESUME_EXECUTION = Sql(
    "UPDATE executions SET status = 'running', owner = ?, updated_ms = ? "
    "WHERE id = ? AND status = 'awaiting_approval'"
)
# Takes the parked execution's row (PostgreSQL waits for a cancel writing it): an approval
# is decided only while its call still waits for it.
STILL_PARKED = Sql(
    "UPDATE executions SET updated_ms = ? WHERE id = ? AND status = 'awaiting_approval'"
)
EXPIRED_APPROVALS = Sql(f"{_SELECT_APPROVAL} WHERE status = 'pending' AND expires_ms <= ?")
SCHEMA_VERSION_ROW = Sql("SELECT version FROM schema_version WHERE id = 1")
INSERT_SCHEMA_VERSION = Sql("INSERT INTO schema_version (id, version) VALUES (1, ?)")


def _placeholders(count: int) -> str:
    return ", ".join("?" * count)


class Store:
    """All persistent state of the gateway."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        self._postgresql = self.dialect == "postgresql"
        dbapi = self.engine.dialect.loaded_dbapi
        self._integrity_error: type[Exception] = dbapi.IntegrityError
        self._driver_error: type[Exception] = dbapi.Error
        # SQLite has one writer at a time. Threads of this process that race for its lock
        # fall into SQLite's busy handler, which sleeps in whole milliseconds: so this
        # process queues its own write transactions and only other processes contend.
        self._writers: anyio.CapacityLimiter | None = None  # made in the loop, on first use
        # SQLite writes run on the caller's thread (the event loop) when the database's
        # write lock is free: see _write.
        self._inline: Any = None
        self._inline_lock = threading.Lock()
        self._batch: list[tuple[Callable[[Db], Any], _Outcome]] = []
        # ... and their WAL is checkpointed on a thread of its own, not by the commit that
        # crosses SQLite's threshold (copying pages back and an fsync, on the loop).
        self._commits_since_checkpoint = 0
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._checkpoint_gate: anyio.Event | None = None
        self._checkpoint_conn: Any = None

    # -- plumbing -------------------------------------------------------------------------

    async def _write(self, fn: Callable[[Db], T]) -> T:
        """Run ``fn`` in a write transaction.

        SQLite: on the event loop's thread, with a connection that never waits for the write
        lock, and grouped: the writes queued during one turn of the loop commit together
        (_flush). A thread hop costs about 0.1 ms of CPU, more than a whole short
        transaction, and writes are serial anyway (one writer per database, and the GIL).
        When another connection holds the lock (another process, or a transaction of this
        one on a worker thread), the transaction goes to a worker thread that waits for it.
        """
        if not self._postgresql:
            gate = self._checkpoint_gate
            if gate is not None:
                await gate.wait()  # our checkpoint has the write lock for a moment
            loop = asyncio.get_running_loop()
            future = _Outcome(loop=loop)
            self._batch.append((fn, future))
            if len(self._batch) == 1:
                loop.call_soon(self._flush)
            kind, value = await future  # uncancellable: it commits, awaited or not
            if kind == "ok":
                if self._commits_since_checkpoint >= CHECKPOINT_EVERY:
                    self._start_checkpoint()
                return cast(T, value)
            if kind == "error":
                raise value
            if self._writers is None:  # "busy": another connection has the write lock
                self._writers = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(partial(self._tx, fn, True), limiter=self._writers)

    def _flush(self) -> None:
        """Group commit: run the write transactions queued during this turn of the event
        loop as one SQLite transaction, each in a savepoint of its own (one that fails or
        aborts rolls back alone), and commit them together. Every queued caller learns its
        outcome only after the COMMIT."""
        batch, self._batch = self._batch, []
        outcomes = self._run_batch([fn for fn, _ in batch])
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)

    def _run_batch(self, fns: list[Callable[[Db], Any]]) -> list[tuple[str, Any]]:
        busy = [("busy", None)] * len(fns)
        if not self._inline_lock.acquire(blocking=False):  # another thread is using it
            return busy
        try:
            try:
                raw = self._inline_connection()
                raw.execute("BEGIN IMMEDIATE")
            except StoreError as exc:
                return [("error", exc)] * len(fns)
            except self._driver_error as exc:
                if getattr(exc, "sqlite_errorcode", None) in (_SQLITE_BUSY, _SQLITE_LOCKED):
                    return busy
                self._drop_inline()
                return [("error", self._unavailable(exc))] * len(fns)
            db = Db(raw, False)
            outcomes: list[tuple[str, Any]] = []
            try:
                for fn in fns:
                    raw.execute("SAVEPOINT w")
                    try:
                        outcomes.append(("ok", fn(db)))
                    except _Abort as abort:
                        raw.execute("ROLLBACK TO w")
                        outcomes.append(("ok", abort.value))
                    except self._integrity_error as exc:
                        raw.execute("ROLLBACK TO w")
                        outcomes.append(("error", exc))
                    except self._driver_error:
                        raise  # the connection may be broken: the whole batch fails
                    except Exception as exc:
                        raw.execute("ROLLBACK TO w")
                        outcomes.append(("error", exc))
                    raw.execute("RELEASE w")
                raw.commit()
            except self._driver_error as exc:
                _quietly(raw.rollback)
                self._drop_inline()
                return [("error", self._unavailable(exc))] * len(fns)
            self._commits_since_checkpoint += 1
            return outcomes
        finally:
            self._inline_lock.release()

    async def _read(self, fn: Callable[[Db], T]) -> T:
        return await anyio.to_thread.run_sync(partial(self._tx, fn, False))

    async def _read_quick(self, fn: Callable[[Db], T]) -> T:
        """A read that walks a bounded part of an index (a few rows): on SQLite it runs on
        the event loop, on the connection the writes use (a thread hop costs more than such a
        read), each statement its own snapshot; elsewhere, or if that connection is busy or
        fails, like ``_read``."""
        if not self._postgresql and self._inline_lock.acquire(blocking=False):
            try:
                return fn(Db(self._inline_connection(), False))
            except (StoreError, self._driver_error):
                pass  # busy or broken: the pooled path reports what is really wrong
            finally:
                self._inline_lock.release()
        return await self._read(fn)

    def _inline_connection(self) -> Any:
        if self._inline is None:
            try:
                proxy = self.engine.raw_connection()
            except (SQLAlchemyError, self._driver_error) as exc:
                raise self._unavailable(exc) from exc
            raw: Any = proxy.driver_connection
            proxy.detach()  # ours for good; closed by aclose
            raw.execute("PRAGMA busy_timeout=0")
            raw.execute("PRAGMA wal_autocheckpoint=0")  # see _start_checkpoint
            self._inline = raw
        return self._inline

    def _drop_inline(self) -> None:
        raw, self._inline = self._inline, None
        if raw is not None:
            _quietly(raw.close)

    def _in_transaction(self, raw: Any, fn: Callable[[Db], T], write: bool) -> T:
        """Begin, run ``fn``, commit; roll back on any exception. A failed COMMIT is raised
        as _CommitFailed: whether it took effect is unknown."""
        if not self._postgresql:
            raw.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
        try:
            result = fn(Db(raw, self._postgresql))
        except _Abort as abort:
            raw.rollback()
            return cast(T, abort.value)
        except BaseException:
            _quietly(raw.rollback)
            raise
        try:
            raw.commit()
        except self._driver_error as exc:
            _quietly(raw.rollback)
            raise _CommitFailed(exc) from exc
        return result

    def _tx(self, fn: Callable[[Db], T], write: bool) -> T:
        """Run ``fn`` in one transaction on a pooled connection (on a worker thread).

        A pooled connection the server dropped (a restart, an idle timeout) shows as a
        disconnect on the first statement; such a transaction is retried once on a new
        connection. A failure at COMMIT is never retried: whether it committed is unknown.
        """
        for attempt in (1, 2):
            try:
                proxy = self.engine.raw_connection()
            except (SQLAlchemyError, self._driver_error) as exc:
                raise self._unavailable(exc) from exc
            raw: Any = proxy.driver_connection
            try:
                return self._in_transaction(raw, fn, write)
            except _CommitFailed as failed:
                proxy.invalidate()
                raise self._unavailable(failed.cause) from failed.cause
            except self._integrity_error:
                raise
            except self._driver_error as exc:
                gone = self.engine.dialect.is_disconnect(cast(Any, exc), raw, None)
                if gone:
                    proxy.invalidate()
                if gone and attempt == 1:
                    log.info("store connection was lost; retrying on a new one: %s", exc)
                    continue
                raise self._unavailable(exc) from exc
            finally:
                proxy.close()
        raise AssertionError("unreachable")

    def _unavailable(self, exc: BaseException) -> StoreError:
        log.warning("store operation failed: %s", exc)
        return StoreError("the execution store is unavailable; try again")

    def open_sync(self) -> None:
        """Create the schema if missing and check its version."""
        try:
            SQLModel.metadata.create_all(self.engine, tables=_TABLES)
            self._tx(self._check_version, True)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the store at {self.safe_url}: {exc}") from exc
        except StoreError as exc:
            if exc.__cause__ is None:
                raise  # the schema is too new: the message says so
            raise StoreError(f"cannot open the store at {self.safe_url}: {exc.__cause__}") from exc

    async def open(self) -> None:
        await anyio.to_thread.run_sync(self.open_sync)

    def _check_version(self, db: Db) -> None:
        row = db.one(SCHEMA_VERSION_ROW)
        if row is None:
            db.run(INSERT_SCHEMA_VERSION, (SCHEMA_VERSION,))
        elif row[0] > SCHEMA_VERSION:
            raise StoreError(
                f"the store's schema is version {row[0]}, newer than this gateway "
                f"({SCHEMA_VERSION}): upgrade the gateway"
            )

    @property
    def safe_url(self) -> str:
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    async def ping(self) -> bool:
        try:
            await self._read(lambda db: db.one("SELECT 1"))
        except StoreError:
            return False
        return True

    def _start_checkpoint(self) -> None:
        """Checkpoint the WAL in the background (SQLite's automatic checkpoint is off on the
        inline connection: it would copy pages back and fsync on the loop).

        PASSIVE, on a worker thread, alongside the writes: it copies almost every frame.
        That alone never lets the log be reused under steady writes (frames keep arriving
        behind it), so once the log holds RESTART_FRAMES frames, also RESTART, which takes
        the write lock to copy the few frames left and start the log over: while it runs,
        this process's writes wait on an event (no thread hop, no busy-handler sleeps) and
        go on inline after it."""
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
            gate = self._checkpoint_gate = anyio.Event()
            try:
                await anyio.to_thread.run_sync(self._run_checkpoint, "RESTART")
            finally:
                self._checkpoint_gate = None
                gate.set()
        except Exception as exc:  # the next one will try again
            log.warning("WAL checkpoint failed: %s", exc)

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
        with self._inline_lock:
            self._drop_inline()
        if self._checkpoint_task is not None:
            await self._checkpoint_task
        if self._checkpoint_conn is not None:
            _quietly(self._checkpoint_conn.close)
            self._checkpoint_conn = None
        await anyio.to_thread.run_sync(self.engine.dispose)

    # -- executions -----------------------------------------------------------------------

    async def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        def run(db: Db) -> ExecutionRecord | None:
            row = db.one(EXECUTION_BY_ID, (execution_id,))
            return _execution(row) if row else None

        return await self._read(run)

    async def find_executions(
        self, principal: str | None, run_id: str | None, call_id: str | None, limit: int = 100
    ) -> list[ExecutionRecord]:
        def run(db: Db) -> list[ExecutionRecord]:
            where, params = [], []
            for column, value in (
                ("principal", principal),
                ("run_id", run_id),
                ("call_id", call_id),
            ):
                if value is not None:
                    where.append(f"{column} = ?")
                    params.append(value)
            clause = f" WHERE {' AND '.join(where)}" if where else ""
            sql = f"{_SELECT_EXECUTION}{clause} ORDER BY created_ms DESC LIMIT ?"
            return [_execution(row) for row in db.all(sql, (*params, int(limit)))]

        return await self._read(run)

    async def insert_completed(
        self, record: ExecutionRecord, events: Sequence[Event]
    ) -> ReserveResult:
        """Record, in one transaction, a call that was never reserved: one rejected before
        reservation, or a read that needed none. Releases any locks it held."""

        def run(db: Db) -> ReserveResult:
            existing = self._same_call(db, *call_identity(record))
            if existing is None:
                db.run(INSERT_EXECUTION, _execution_row(record))
            db.run(RELEASE_LOCKS, (record.id,))
            if existing is not None:
                return existing
            self._insert_events(db, events, fresh=True)
            return Reserved()

        return await self._write(run)

    async def reserve(
        self,
        record: ExecutionRecord | Callable[[], ExecutionRecord],
        events: Sequence[Event],
        claim: IdempotencyClaim | None,
        consume_approval: str | None = None,
        on_existing: Callable[[Existing], Sequence[Event]] | None = None,
        call: CallIdentity | None = None,
    ) -> ReserveResult:
        """Write the execution record (and idempotency claim) before any side effect.

        An execution with the same principal, run_id and call_id answers first
        (``Existing.by == "call_id"``), then the idempotency claim. ``call`` is the request's
        identity (``call_identity`` of its record), given so a replay need not build the record.

        ``consume_approval`` turns that approval from approved to used in the same
        transaction: a token is spent exactly when its execution becomes durable.
        ``on_existing``: makes the events to append, in the same transaction, to the
        execution an idempotency key resolved to (a replay's note on the first call's log);
        they must be new events, made by that call.
        ``record`` may be a function that builds it, called only when the key resolved to
        nothing (a replay never needs its own record); it must return the same record each
        time it is called.
        """

        def the_record() -> ExecutionRecord:
            return record() if callable(record) else record

        identity = call or call_identity(the_record())

        def run(db: Db) -> ReserveResult:
            # Call identity answers first (docs/api.md, "Which answer comes first"): an
            # identical resend gets its own execution as it stands; a reused call_id is refused
            # whatever its key says. Only then does the key resolve to another call's result.
            same = self._same_call(db, *identity)
            if same is not None:
                return same
            if claim is not None:
                existing = self._claimed(db, claim)
                if existing is not None:
                    if on_existing is not None:  # its events are made now: none is known
                        self._insert_events(db, on_existing(existing), unseen=True)
                    return existing
            record = the_record()
            if consume_approval is not None and not db.run(
                SET_APPROVAL, ("used", consume_approval, "approved")
            ):
                raise _Abort(ApprovalUnavailable())
            db.run(INSERT_EXECUTION, _execution_row(record))
            if claim is not None:
                db.run(
                    INSERT_CLAIM,
                    (
                        claim.scope,
                        record.id,
                        claim.arguments_sha256,
                        claim.tool_version,
                        claim.expires_ms,
                    ),
                )
            self._insert_events(db, events, fresh=True)
            return Reserved()

        try:
            return await self._write(run)
        except self._integrity_error:
            # Another replica reserved the same key or call between our read and insert.
            return await self._write(lambda db: self._winner(db, identity, claim))

    def _winner(self, db: Db, call: CallIdentity, claim: IdempotencyClaim | None) -> ReserveResult:
        found = self._same_call(db, *call) or (self._claimed(db, claim) if claim else None)
        if found is None:
            raise StoreError("the reservation conflicted but no winner was found; try again")
        return found

    def _claimed(self, db: Db, claim: IdempotencyClaim) -> Existing | None:
        db.advisory_lock(claim.scope)
        row = db.one(CLAIM_BY_SCOPE, (claim.scope,))  # with its execution's row
        if row is None:
            return None
        _, arguments_sha256, tool_version, expires_ms = row[:4]
        first = row[4:]
        if expires_ms <= now_ms() or first[0] is None:  # expired, or its execution is gone
            db.run(DELETE_CLAIM, (claim.scope,))
            return None
        same = arguments_sha256 == claim.arguments_sha256 and tool_version == claim.tool_version
        return Existing(_execution(first), "idempotency_key", same)

    def _same_call(
        self, db: Db, principal: str, run_id: str, call_id: str, payload_sha256: str
    ) -> Existing | None:
        row = db.one(EXECUTION_BY_CALL, (principal, run_id, call_id))
        if row is None:
            return None
        found = _execution(row)
        return Existing(found, "call_id", found.payload_sha256 == payload_sha256)

    async def append(
        self, execution_id: str, events: Sequence[Event], status: Status | None = None
    ) -> None:
        """Make ``events`` durable (and move the status) before the step they describe."""

        def run(db: Db) -> None:
            if status is not None:
                db.run(SET_STATUS, (status.value, now_ms(), execution_id))
            self._insert_events(db, events)

        await self._write(run)

    async def set_status(
        self,
        execution_id: str,
        from_statuses: Sequence[Status],
        to: Status,
        events: Sequence[Event] = (),
        owner: str | None = None,
    ) -> bool:
        """Move the status only from one of ``from_statuses`` (compare-and-set)."""
        owner_set = ", owner = ?" if owner is not None else ""
        sql = Sql(
            f"UPDATE executions SET status = ?, updated_ms = ?{owner_set} WHERE id = ? "
            f"AND status IN ({_placeholders(len(from_statuses))})"
        )
        params = (
            to.value,
            now_ms(),
            *((owner,) if owner is not None else ()),
            execution_id,
            *(s.value for s in from_statuses),
        )

        def run(db: Db) -> bool:
            if not db.run(sql, params):
                return False
            self._insert_events(db, events)
            return True

        return await self._write(run)

    async def resolve_outcome(
        self, execution_id: str, from_outcome: str, outcome: str, result_json: str, event: Event
    ) -> bool:
        """Replace the outcome (only if it still is ``from_outcome``) and log why."""

        def run(db: Db) -> bool:
            params = (outcome, result_json, now_ms(), execution_id, from_outcome)
            if not db.run(RESOLVE_OUTCOME, params):
                return False
            self._insert_events(db, [event])
            return True

        return await self._write(run)

    async def heartbeat(self, execution_id: str) -> None:
        """The owner is alive: recovery leaves executions with a fresh heartbeat alone."""
        await self._write(lambda db: db.run(HEARTBEAT, (now_ms(), execution_id)))

    async def unfinished(self, statuses: Sequence[Status]) -> list[ExecutionRecord]:
        sql = Sql(
            f"{_SELECT_EXECUTION} WHERE status IN ({_placeholders(len(statuses))}) "
            "ORDER BY created_ms"
        )

        def run(db: Db) -> list[ExecutionRecord]:
            return [_execution(row) for row in db.all(sql, [s.value for s in statuses])]

        return await self._read(run)

    async def claim_queued(self, owner: str) -> ExecutionRecord | None:
        """Take the oldest queued execution for ``owner`` (safe across replicas)."""

        def run(db: Db) -> ExecutionRecord | None:
            found = db.one(CLAIM_QUEUED_PG if self._postgresql else CLAIM_QUEUED_SQLITE)
            if found is None:
                return None
            db.run(TAKE_QUEUED, (owner, now_ms(), found[0]))
            return _execution(db.one(EXECUTION_BY_ID, (found[0],)))

        return await self._write(run)

    async def find_by_cancellation_token(self, principal: str, token: str) -> list[ExecutionRecord]:
        def run(db: Db) -> list[ExecutionRecord]:
            return [_execution(row) for row in db.all(BY_CANCELLATION_TOKEN, (principal, token))]

        return await self._read(run)

    async def commit(
        self,
        execution_id: str,
        *,
        outcome: str,
        result_json: str,
        events: Sequence[Event],
        fencing_json: str | None,
    ) -> bool:
        """One transaction: result, idempotency state, lock release and the last events.

        False (and nothing written) when the execution had already completed: a result is
        committed once."""

        def run(db: Db) -> bool:
            params = (outcome, result_json, fencing_json, now_ms(), execution_id)
            if not db.run(COMMIT_EXECUTION, params):
                return False
            db.run(COMMIT_CLAIM, (execution_id,))
            db.run(RELEASE_LOCKS, (execution_id,))
            self._insert_events(db, events)
            return True

        return await self._write(run)

    def _insert_events(
        self, db: Db, events: Iterable[Event], *, fresh: bool = False, unseen: bool = False
    ) -> None:
        """Append events; the store numbers them (writers outside the running flow, such
        as a cancel, may append to the same execution). Applying an event twice changes
        nothing: its id is its identity. ``fresh``: the execution was inserted by this very
        transaction, so it has no events yet. ``unseen``: the events were made inside this
        transaction, so none can have been applied before."""
        events = list(events)
        if not events:
            return
        execution_id = events[0].execution_id
        if any(e.execution_id != execution_id for e in events):
            raise ValueError("one append is for one execution")
        if fresh:
            db.many(INSERT_EVENT, [_event_row(e, i) for i, e in enumerate(events)])
            return
        db.advisory_lock("ev:" + execution_id)
        if not unseen:
            ids = [e.id for e in events]
            known = {
                row[0]
                for row in db.all(
                    f"SELECT id FROM events WHERE id IN ({_placeholders(len(ids))})", ids
                )
            }
            events = [e for e in events if e.id not in known]  # applied before
            if not events:
                return
        # APPEND_EVENT numbers each row after the last one: (..., execution_id, seq query).
        db.many(APPEND_EVENT, [_event_row(e, e.execution_id) for e in events])

    async def events(self, execution_id: str, after_seq: int = -1) -> list[Event]:
        def run(db: Db) -> list[Event]:
            return [
                Event(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]))
                for r in db.all(EVENTS_AFTER, (execution_id, after_seq))
            ]

        return await self._read(run)

    # -- locks ----------------------------------------------------------------------------

    async def try_acquire(
        self, holder: str, holder_call_id: str, requests: Sequence[LockRequest], lease_s: float
    ) -> dict[str, int] | LockBusy:
        """Take every lock in ``requests`` (sorted by key) or none; one attempt."""
        ordered = sorted(requests, key=lambda r: r.key)

        def run(db: Db) -> dict[str, int] | LockBusy:
            tokens: dict[str, int] = {}
            now = now_ms()
            lease_until = now + int(lease_s * 1000)
            for req in ordered:
                db.advisory_lock("lock:" + req.key)
                db.run(EXPIRE_LOCK, (req.key, now))
                conflict = (
                    LOCK_CONFLICT_SHARED
                    if req.mode is LockMode.SHARED
                    else (LOCK_CONFLICT_EXCLUSIVE)
                )
                busy = db.one(conflict, (req.key, holder))
                if busy is not None:
                    # A cancel from any process is seen here: the waiter polls anyway.
                    cancelled = db.one(WAITER_CANCELLED, (holder,)) is not None
                    raise _Abort(LockBusy(req.key, busy[0], busy[1], cancelled))  # roll back
                token = int(db.one(NEXT_FENCE, (req.key,))[0])
                db.run(
                    UPSERT_LOCK,
                    (req.key, holder, holder_call_id, req.mode.value, token, lease_until),
                )
                tokens[req.key] = token
            return tokens

        return await self._write(run)

    async def renew_locks(self, holder: str, lease_s: float) -> int:
        """Extend the lease of every lock ``holder`` has; returns how many it still holds."""
        return await self._write(
            lambda db: db.run(RENEW_LOCKS, (now_ms() + int(lease_s * 1000), holder))
        )

    async def release_locks(self, holder: str) -> None:
        await self._write(lambda db: db.run(RELEASE_LOCKS, (holder,)))

    # -- approvals ------------------------------------------------------------------------

    async def checkpoint_for_approval(
        self, approval: ApprovalRecord, events: Sequence[Event]
    ) -> None:
        """Park the execution as awaiting_approval with its approval, in one transaction."""

        def run(db: Db) -> None:
            db.run(INSERT_APPROVAL, _approval_row(approval))
            db.run(PARK_EXECUTION, (approval.id, now_ms(), approval.execution_id))
            db.run(RELEASE_LOCKS, (approval.execution_id,))
            self._insert_events(db, events)

        await self._write(run)

    async def decide_approval(
        self, approval_id: str, verdict: str, by: str, comment: str | None
    ) -> ApprovalRecord | str:
        """pending → ``verdict`` (approved|denied); else why it cannot be decided: its
        status (a pending one past its expiry becomes ``expired``; one whose call no longer
        waits for it, ``withdrawn``), or ``not_found``."""

        def run(db: Db) -> ApprovalRecord | str:
            row = db.one(APPROVAL_BY_ID, (approval_id,))
            if row is None:
                return "not_found"
            found = _approval(row)
            now = now_ms()
            if found.status != "pending":
                return found.status
            if found.expires_ms <= now:
                db.run(SET_APPROVAL, ("expired", approval_id, "pending"))
                return "expired"
            if not db.run(STILL_PARKED, (now, found.execution_id)):
                db.run(SET_APPROVAL, ("withdrawn", approval_id, "pending"))
                return "withdrawn"
            decided = db.run(DECIDE_APPROVAL, (verdict, by, now, comment, approval_id, "pending"))
            after = _approval(db.one(APPROVAL_BY_ID, (approval_id,)))
            return after if decided else after.status  # another decision came first

        return await self._write(run)

    async def withdraw_approval(self, approval_id: str) -> bool:
        """pending → withdrawn: the call it was for was cancelled (or has ended)."""
        changed = await self._write(
            lambda db: db.run(SET_APPROVAL, ("withdrawn", approval_id, "pending"))
        )
        return bool(changed)

    async def resume(self, execution_id: str, approval_id: str, events: Sequence[Event]) -> bool:
        """Spend the approval (approved → used) and mark the parked execution running, in one
        transaction; False when the approval was already spent or never approved."""

        def run(db: Db) -> bool:
            if not db.run(SET_APPROVAL, ("used", approval_id, "approved")):
                return False
            if not db.run(RESUME_EXECUTION, (INSTANCE_ID, now_ms(), execution_id)):
                raise _Abort(False)  # cancelled while parked: the approval stays unspent
            self._insert_events(db, events)
            return True

        return await self._write(run)

    async def expired_approvals(self) -> list[ApprovalRecord]:
        """Mark every pending approval past its expiry as expired; returns those it marked."""

        def run(db: Db) -> list[ApprovalRecord]:
            marked = []
            for row in db.all(EXPIRED_APPROVALS, (now_ms(),)):
                found = _approval(row)
                if db.run(SET_APPROVAL, ("expired", found.id, "pending")):
                    marked.append(replace(found, status="expired"))
            return marked

        return await self._write(run)

    async def release_claim(self, execution_id: str) -> None:
        """Forget the idempotency key of ``execution_id`` so the key can be used again."""
        await self._write(lambda db: db.run(RELEASE_CLAIM, (execution_id,)))

    async def sweep_idempotency(self) -> int:
        """Delete idempotency records past their expiry; returns how many."""
        return await self._write(lambda db: db.run(SWEEP_CLAIMS, (now_ms(),)))

    async def recent_usage(
        self, principal: str, workspace_id: str, risk: str, since_ms: int, limit: int
    ) -> tuple[int, int | None]:
        """(how many, up to ``limit``; oldest created_ms) of the executions of ``principal``
        in ``workspace_id`` at ``risk`` created since ``since_ms``: what quotas count."""
        window = (principal, workspace_id, risk, since_ms)

        def run(db: Db) -> tuple[int, int | None]:
            (count,) = db.one(RECENT_COUNT, (*window, max(limit, 0)))
            oldest = db.one(OLDEST_RECENT, window) if count else None
            return int(count), (int(oldest[0]) if oldest else None)

        return await self._read_quick(run)

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        def run(db: Db) -> ApprovalRecord | None:
            row = db.one(APPROVAL_BY_ID, (approval_id,))
            return _approval(row) if row else None

        return await self._read(run)

    async def list_approvals(self, status: str | None, limit: int = 100) -> list[ApprovalRecord]:
        def run(db: Db) -> list[ApprovalRecord]:
            where, params = ("", ()) if status is None else (" WHERE status = ?", (status,))
            sql = f"{_SELECT_APPROVAL}{where} ORDER BY requested_ms DESC LIMIT ?"
            return [_approval(row) for row in db.all(sql, (*params, int(limit)))]

        return await self._read(run)


class _Outcome(asyncio.Future[tuple[str, Any]]):
    """The outcome of one write of a group commit, for the task that queued it.

    It refuses to be cancelled: a task cancelled while its write is queued still waits for the
    COMMIT (the write happens, awaited or not) and gets its CancelledError only then, so it
    never goes on believing a committed write did not happen. (A shielded anyio cancel scope
    around the await does the same for anyio's cancellations, not for a plain
    ``Task.cancel``, and its enter and exit cost several times this.)
    """

    def cancel(self, msg: Any = None) -> bool:
        return False


def _quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception as exc:  # the original error is the one to report
        log.debug("rollback failed: %s", exc)


def _event_row(event: Event, seq: int | str) -> tuple[Any, ...]:
    """An events row, ``seq`` given (an int) or counted by APPEND_EVENT (the execution id)."""
    data = jsontext.stored(event.data)
    return (event.id, event.execution_id, seq, event.type, event.version, event.at_ms, data)


_STATUS_AT = _EXECUTION_COLUMNS.index("status")
_EXECUTION_VALUES = attrgetter(*_EXECUTION_COLUMNS)


def _execution_row(record: ExecutionRecord) -> tuple[Any, ...]:
    row = list(_EXECUTION_VALUES(record))
    row[_STATUS_AT] = row[_STATUS_AT].value
    return tuple(row)


def _execution(row: Sequence[Any]) -> ExecutionRecord:
    values = list(row)
    values[_STATUS_AT] = Status(values[_STATUS_AT])
    return ExecutionRecord(*values)


def _approval_row(approval: ApprovalRecord) -> tuple[Any, ...]:
    return (
        approval.id,
        approval.execution_id,
        approval.status,
        approval.tool_name,
        approval.tool_version,
        approval.arguments_sha256,
        approval.principal,
        approval.workspace_id,
        json.dumps(list(approval.reasons)),
        json.dumps(approval.arguments, default=str),
        json.dumps(approval.preview, default=str),
        approval.requested_ms,
        approval.expires_ms,
        approval.decided_by,
        approval.decided_ms,
        approval.comment,
    )


def _approval(row: Sequence[Any]) -> ApprovalRecord:
    (id_, execution_id, status, tool_name, tool_version, arguments_sha256, principal,
     workspace_id, reasons_json, arguments_json, preview_json, requested_ms, expires_ms,
     decided_by, decided_ms, comment) = row  # fmt: skip
    return ApprovalRecord(
        id=id_,
        execution_id=execution_id,
        status=status,
        tool_name=tool_name,
        tool_version=tool_version,
        arguments_sha256=arguments_sha256,
        principal=principal,
        workspace_id=workspace_id,
        reasons=tuple(json.loads(reasons_json)),
        arguments=json.loads(arguments_json),
        preview=json.loads(preview_json),
        requested_ms=requested_ms,
        expires_ms=expires_ms,
        decided_by=decided_by,
        decided_ms=decided_ms,
        comment=comment,
    )
