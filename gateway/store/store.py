"""The store: the only module that runs queries.

Its API is async; each method runs one short transaction on a worker thread with a
synchronous SQLAlchemy engine (one thread hop per transaction, not per statement).
SQLite runs in WAL mode and starts write transactions with ``BEGIN IMMEDIATE`` so two
writers never deadlock on a lock upgrade; PostgreSQL serialises per-key work with
transaction-scoped advisory locks, so several gateway processes can share one database.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlmodel import SQLModel

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
EXECUTIONS = cast(sa.Table, ExecutionRow.__table__)  # type: ignore[attr-defined]
EVENTS = cast(sa.Table, EventRow.__table__)  # type: ignore[attr-defined]
IDEMPOTENCY = cast(sa.Table, IdempotencyRow.__table__)  # type: ignore[attr-defined]
LOCKS = cast(sa.Table, LockRow.__table__)  # type: ignore[attr-defined]
FENCES = cast(sa.Table, LockFenceRow.__table__)  # type: ignore[attr-defined]
APPROVALS = cast(sa.Table, ApprovalRow.__table__)  # type: ignore[attr-defined]
VERSION = cast(sa.Table, SchemaVersionRow.__table__)  # type: ignore[attr-defined]


def now_ms() -> int:
    return int(time.time() * 1000)


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


def make_engine(url: str) -> Engine:
    """A synchronous engine with the pragmas each backend needs."""
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
    return sa.create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
    conn.exec_driver_sql(f"BEGIN {mode}")


def _lock_id(key: str) -> int:
    # A stable 63-bit id for pg_advisory_xact_lock (crc32 of two halves keeps it portable).
    data = key.encode("utf-8")
    return (zlib.crc32(data) << 31) ^ zlib.crc32(data[::-1])


class Store:
    """All persistent state of the gateway."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        self._insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
        # SQLite has one writer at a time. Threads of this process that race for its lock
        # fall into SQLite's busy handler, which sleeps in whole milliseconds: so this
        # process queues its own write transactions and only other processes contend.
        self._writers: anyio.CapacityLimiter | None = None  # made in the loop, on first use

    # -- plumbing -------------------------------------------------------------------------

    async def _write(self, fn: Callable[[Connection], T]) -> T:
        if self.dialect == "sqlite" and self._writers is None:
            self._writers = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(partial(self._tx, fn, True), limiter=self._writers)

    async def _read(self, fn: Callable[[Connection], T]) -> T:
        return await anyio.to_thread.run_sync(partial(self._tx, fn, False))

    def _tx(self, fn: Callable[[Connection], T], write: bool) -> T:
        try:
            with self.engine.connect() as conn:
                if self.dialect == "sqlite" and not write:
                    conn = conn.execution_options(sqlite_begin="DEFERRED")
                with conn.begin():
                    return fn(conn)
        except _Abort as abort:
            return cast(T, abort.value)
        except IntegrityError:
            raise
        except (OperationalError, SQLAlchemyError) as exc:
            log.warning("store operation failed: %s", exc)
            raise StoreError("the execution store is unavailable; try again") from exc

    def open_sync(self) -> None:
        """Create the schema if missing and check its version."""
        try:
            SQLModel.metadata.create_all(self.engine, tables=_TABLES)
            self._tx(self._check_version, True)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the store at {self.safe_url}: {exc}") from exc

    async def open(self) -> None:
        await anyio.to_thread.run_sync(self.open_sync)

    def _check_version(self, conn: Connection) -> None:
        row = conn.execute(sa.select(VERSION.c.version).where(VERSION.c.id == 1)).first()
        if row is None:
            conn.execute(VERSION.insert().values(id=1, version=SCHEMA_VERSION))
        elif row.version > SCHEMA_VERSION:
            raise StoreError(
                f"the store's schema is version {row.version}, newer than this gateway "
                f"({SCHEMA_VERSION}): upgrade the gateway"
            )

    @property
    def safe_url(self) -> str:
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    async def ping(self) -> bool:
        try:
            await self._read(lambda c: c.execute(sa.text("SELECT 1")).scalar())
        except StoreError:
            return False
        return True

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.engine.dispose)

    # -- executions -----------------------------------------------------------------------

    async def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        def run(conn: Connection) -> ExecutionRecord | None:
            row = conn.execute(EXECUTIONS.select().where(EXECUTIONS.c.id == execution_id)).first()
            return _execution(row) if row else None

        return await self._read(run)

    async def find_executions(
        self, principal: str | None, run_id: str | None, call_id: str | None, limit: int = 100
    ) -> list[ExecutionRecord]:
        def run(conn: Connection) -> list[ExecutionRecord]:
            query = EXECUTIONS.select().order_by(EXECUTIONS.c.created_ms.desc()).limit(limit)
            if principal is not None:
                query = query.where(EXECUTIONS.c.principal == principal)
            if run_id is not None:
                query = query.where(EXECUTIONS.c.run_id == run_id)
            if call_id is not None:
                query = query.where(EXECUTIONS.c.call_id == call_id)
            return [_execution(row) for row in conn.execute(query)]

        return await self._read(run)

    async def find_call(self, principal: str, run_id: str, call_id: str) -> ExecutionRecord | None:
        found = await self.find_executions(principal, run_id, call_id, limit=1)
        return found[0] if found else None

    async def insert_completed(
        self, record: ExecutionRecord, events: Sequence[Event]
    ) -> ReserveResult:
        """Record, in one transaction, a call that was never reserved: one rejected before
        reservation, or a read that needed none. Releases any locks it held."""

        def run(conn: Connection) -> ReserveResult:
            existing = self._same_call(conn, record)
            if existing is not None:
                conn.execute(LOCKS.delete().where(LOCKS.c.holder == record.id))
                return existing
            conn.execute(EXECUTIONS.insert().values(**asdict(record) | _status(record)))
            conn.execute(LOCKS.delete().where(LOCKS.c.holder == record.id))
            self._insert_events(conn, events)
            return Reserved()

        return await self._write(run)

    async def reserve(
        self,
        record: ExecutionRecord,
        events: Sequence[Event],
        claim: IdempotencyClaim | None,
        consume_approval: str | None = None,
    ) -> ReserveResult:
        """Write the execution record (and idempotency claim) before any side effect.

        ``consume_approval`` turns that approval from approved to used in the same
        transaction: a token is spent exactly when its execution becomes durable.
        """

        def run(conn: Connection) -> ReserveResult:
            if claim is not None:
                existing = self._claimed(conn, claim)
                if existing is not None:
                    return existing
            same = self._same_call(conn, record)
            if same is not None:
                return same
            if consume_approval is not None and not self._set_approval(
                conn, consume_approval, "approved", "used", None, None, 0
            ):
                raise _Abort(ApprovalUnavailable())
            conn.execute(EXECUTIONS.insert().values(**asdict(record) | _status(record)))
            if claim is not None:
                conn.execute(
                    IDEMPOTENCY.insert().values(
                        scope=claim.scope,
                        execution_id=record.id,
                        arguments_sha256=claim.arguments_sha256,
                        tool_version=claim.tool_version,
                        state="reserved",
                        expires_ms=claim.expires_ms,
                    )
                )
            self._insert_events(conn, events)
            return Reserved()

        try:
            return await self._write(run)
        except IntegrityError:
            # Another replica reserved the same key or call between our read and insert.
            return await self._write(lambda conn: self._winner(conn, record, claim))

    def _winner(
        self, conn: Connection, record: ExecutionRecord, claim: IdempotencyClaim | None
    ) -> ReserveResult:
        found = (self._claimed(conn, claim) if claim else None) or self._same_call(conn, record)
        if found is None:
            raise StoreError("the reservation conflicted but no winner was found; try again")
        return found

    def _claimed(self, conn: Connection, claim: IdempotencyClaim) -> Existing | None:
        if self.dialect == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_id(claim.scope))))
        row = conn.execute(IDEMPOTENCY.select().where(IDEMPOTENCY.c.scope == claim.scope)).first()
        if row is None:
            return None
        if row.expires_ms <= now_ms():
            conn.execute(IDEMPOTENCY.delete().where(IDEMPOTENCY.c.scope == claim.scope))
            return None
        first = conn.execute(EXECUTIONS.select().where(EXECUTIONS.c.id == row.execution_id)).first()
        if first is None:
            conn.execute(IDEMPOTENCY.delete().where(IDEMPOTENCY.c.scope == claim.scope))
            return None
        same = (
            row.arguments_sha256 == claim.arguments_sha256
            and row.tool_version == claim.tool_version
        )
        return Existing(_execution(first), "idempotency_key", same)

    def _same_call(self, conn: Connection, record: ExecutionRecord) -> Existing | None:
        row = conn.execute(
            EXECUTIONS.select().where(
                EXECUTIONS.c.principal == record.principal,
                EXECUTIONS.c.run_id == record.run_id,
                EXECUTIONS.c.call_id == record.call_id,
            )
        ).first()
        if row is None:
            return None
        return Existing(_execution(row), "call_id", row.payload_sha256 == record.payload_sha256)

    async def append(
        self, execution_id: str, events: Sequence[Event], status: Status | None = None
    ) -> None:
        """Make ``events`` durable (and move the status) before the step they describe."""

        def run(conn: Connection) -> None:
            if status is not None:
                conn.execute(
                    EXECUTIONS.update()
                    .where(EXECUTIONS.c.id == execution_id)
                    .values(status=status.value, updated_ms=now_ms())
                )
            self._insert_events(conn, events)

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

        def run(conn: Connection) -> bool:
            values: dict[str, Any] = {"status": to.value, "updated_ms": now_ms()}
            if owner is not None:
                values["owner"] = owner
            result = conn.execute(
                EXECUTIONS.update()
                .where(
                    EXECUTIONS.c.id == execution_id,
                    EXECUTIONS.c.status.in_([s.value for s in from_statuses]),
                )
                .values(**values)
            )
            if not result.rowcount:
                return False
            self._insert_events(conn, events)
            return True

        return await self._write(run)

    async def resolve_outcome(
        self, execution_id: str, from_outcome: str, outcome: str, result_json: str, event: Event
    ) -> bool:
        """Replace the outcome (only if it still is ``from_outcome``) and log why."""

        def run(conn: Connection) -> bool:
            changed = conn.execute(
                EXECUTIONS.update()
                .where(EXECUTIONS.c.id == execution_id, EXECUTIONS.c.outcome == from_outcome)
                .values(outcome=outcome, result_json=result_json, updated_ms=now_ms())
            )
            if not changed.rowcount:
                return False
            self._insert_events(conn, [event])
            return True

        return await self._write(run)

    async def heartbeat(self, execution_id: str) -> None:
        """The owner is alive: recovery leaves executions with a fresh heartbeat alone."""
        await self._write(
            lambda conn: conn.execute(
                EXECUTIONS.update()
                .where(EXECUTIONS.c.id == execution_id)
                .values(updated_ms=now_ms())
            )
        )

    async def unfinished(self, statuses: Sequence[Status]) -> list[ExecutionRecord]:
        def run(conn: Connection) -> list[ExecutionRecord]:
            rows = conn.execute(
                EXECUTIONS.select()
                .where(EXECUTIONS.c.status.in_([s.value for s in statuses]))
                .order_by(EXECUTIONS.c.created_ms)
            )
            return [_execution(row) for row in rows]

        return await self._read(run)

    async def claim_queued(self, owner: str) -> ExecutionRecord | None:
        """Take the oldest queued execution for ``owner`` (safe across replicas)."""

        def run(conn: Connection) -> ExecutionRecord | None:
            query = (
                sa.select(EXECUTIONS.c.id)
                .where(EXECUTIONS.c.status == Status.QUEUED.value)
                .order_by(EXECUTIONS.c.created_ms)
                .limit(1)
            )
            if self.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            found = conn.execute(query).scalar_one_or_none()
            if found is None:
                return None
            conn.execute(
                EXECUTIONS.update()
                .where(EXECUTIONS.c.id == found)
                .values(status=Status.RUNNING.value, owner=owner, updated_ms=now_ms())
            )
            row = conn.execute(EXECUTIONS.select().where(EXECUTIONS.c.id == found)).first()
            return _execution(row)

        return await self._write(run)

    async def find_by_cancellation_token(self, principal: str, token: str) -> list[ExecutionRecord]:
        def run(conn: Connection) -> list[ExecutionRecord]:
            rows = conn.execute(
                EXECUTIONS.select().where(
                    EXECUTIONS.c.principal == principal,
                    EXECUTIONS.c.cancellation_token == token,
                    EXECUTIONS.c.status != Status.COMPLETED.value,
                )
            )
            return [_execution(row) for row in rows]

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

        def run(conn: Connection) -> bool:
            done = conn.execute(
                EXECUTIONS.update()
                .where(
                    EXECUTIONS.c.id == execution_id,
                    EXECUTIONS.c.status != Status.COMPLETED.value,
                )
                .values(
                    status=Status.COMPLETED.value,
                    outcome=outcome,
                    result_json=result_json,
                    fencing_json=fencing_json,
                    updated_ms=now_ms(),
                )
            )
            if not done.rowcount:
                return False
            conn.execute(
                IDEMPOTENCY.update()
                .where(IDEMPOTENCY.c.execution_id == execution_id)
                .values(state="committed")
            )
            conn.execute(LOCKS.delete().where(LOCKS.c.holder == execution_id))
            self._insert_events(conn, events)
            return True

        return await self._write(run)

    def _insert_events(self, conn: Connection, events: Iterable[Event]) -> None:
        """Append events; the store numbers them (writers outside the running flow, such
        as a cancel, may append to the same execution)."""
        events = list(events)
        if not events:
            return
        execution_id = events[0].execution_id
        if any(e.execution_id != execution_id for e in events):
            raise ValueError("one append is for one execution")
        if self.dialect == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_id("ev:" + execution_id))))
        known = set(
            conn.execute(
                sa.select(EVENTS.c.id).where(EVENTS.c.id.in_([e.id for e in events]))
            ).scalars()
        )
        events = [e for e in events if e.id not in known]  # applied before: changes nothing
        if not events:
            return
        last = conn.execute(
            sa.select(sa.func.coalesce(sa.func.max(EVENTS.c.seq), -1)).where(
                EVENTS.c.execution_id == execution_id
            )
        ).scalar_one()
        rows = [
            {
                "id": e.id,
                "execution_id": e.execution_id,
                "seq": int(last) + 1 + i,
                "type": e.type,
                "version": e.version,
                "at_ms": e.at_ms,
                "data_json": json.dumps(e.data, separators=(",", ":"), default=str),
            }
            for i, e in enumerate(events)
        ]
        # Applying an event twice changes nothing: its id is its identity.
        conn.execute(
            self._insert(EVENTS).values(rows).on_conflict_do_nothing(index_elements=[EVENTS.c.id])
        )

    async def events(self, execution_id: str, after_seq: int = -1) -> list[Event]:
        def run(conn: Connection) -> list[Event]:
            rows = conn.execute(
                EVENTS.select()
                .where(EVENTS.c.execution_id == execution_id, EVENTS.c.seq > after_seq)
                .order_by(EVENTS.c.seq)
            )
            return [
                Event(
                    r.id, r.execution_id, r.seq, r.type, r.version, r.at_ms, json.loads(r.data_json)
                )
                for r in rows
            ]

        return await self._read(run)

    # -- locks ----------------------------------------------------------------------------

    async def try_acquire(
        self, holder: str, holder_call_id: str, requests: Sequence[LockRequest], lease_s: float
    ) -> dict[str, int] | LockBusy:
        """Take every lock in ``requests`` (sorted by key) or none; one attempt."""

        def run(conn: Connection) -> dict[str, int] | LockBusy:
            tokens: dict[str, int] = {}
            now = now_ms()
            for req in sorted(requests, key=lambda r: r.key):
                busy = self._conflict(conn, holder, req, now)
                if busy is not None:
                    raise _Abort(busy)  # roll back the locks taken so far
                tokens[req.key] = self._take(conn, holder, holder_call_id, req, now, lease_s)
            return tokens

        return await self._write(run)

    def _conflict(
        self, conn: Connection, holder: str, req: LockRequest, now: int
    ) -> LockBusy | None:
        if self.dialect == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_id("lock:" + req.key))))
        conn.execute(LOCKS.delete().where(LOCKS.c.key == req.key, LOCKS.c.lease_until_ms < now))
        query = LOCKS.select().where(LOCKS.c.key == req.key, LOCKS.c.holder != holder)
        if req.mode is LockMode.SHARED:
            query = query.where(LOCKS.c.mode == LockMode.EXCLUSIVE.value)
        row = conn.execute(query.limit(1)).first()
        return LockBusy(req.key, row.holder, row.holder_call_id) if row else None

    def _take(
        self,
        conn: Connection,
        holder: str,
        holder_call_id: str,
        req: LockRequest,
        now: int,
        lease_s: float,
    ) -> int:
        stmt = self._insert(FENCES).values(key=req.key, last_token=1)
        stmt = stmt.on_conflict_do_update(
            index_elements=[FENCES.c.key], set_={"last_token": FENCES.c.last_token + 1}
        )
        conn.execute(stmt)
        token = conn.execute(
            sa.select(FENCES.c.last_token).where(FENCES.c.key == req.key)
        ).scalar_one()
        conn.execute(LOCKS.delete().where(LOCKS.c.key == req.key, LOCKS.c.holder == holder))
        conn.execute(
            LOCKS.insert().values(
                key=req.key,
                holder=holder,
                holder_call_id=holder_call_id,
                mode=req.mode.value,
                token=token,
                lease_until_ms=now + int(lease_s * 1000),
            )
        )
        return int(token)

    async def renew_locks(self, holder: str, lease_s: float) -> int:
        """Extend the lease of every lock ``holder`` has; returns how many it still holds."""

        def run(conn: Connection) -> int:
            result = conn.execute(
                LOCKS.update()
                .where(LOCKS.c.holder == holder)
                .values(lease_until_ms=now_ms() + int(lease_s * 1000))
            )
            return int(result.rowcount)

        return await self._write(run)

    async def release_locks(self, holder: str) -> None:
        await self._write(lambda conn: conn.execute(LOCKS.delete().where(LOCKS.c.holder == holder)))

    # -- approvals ------------------------------------------------------------------------

    async def checkpoint_for_approval(
        self, approval: ApprovalRecord, events: Sequence[Event]
    ) -> None:
        """Park the execution as awaiting_approval with its approval, in one transaction."""

        def run(conn: Connection) -> None:
            conn.execute(
                APPROVALS.insert().values(
                    **{
                        k: v
                        for k, v in asdict(approval).items()
                        if k not in ("reasons", "arguments", "preview")
                    },
                    reasons_json=json.dumps(list(approval.reasons)),
                    arguments_json=json.dumps(approval.arguments, default=str),
                    preview_json=json.dumps(approval.preview, default=str),
                )
            )
            conn.execute(
                EXECUTIONS.update()
                .where(EXECUTIONS.c.id == approval.execution_id)
                .values(
                    status=Status.AWAITING_APPROVAL.value,
                    approval_id=approval.id,
                    updated_ms=now_ms(),
                )
            )
            conn.execute(LOCKS.delete().where(LOCKS.c.holder == approval.execution_id))
            self._insert_events(conn, events)

        await self._write(run)

    async def decide_approval(
        self, approval_id: str, verdict: str, by: str, comment: str | None
    ) -> ApprovalRecord | str:
        """pending → ``verdict`` (approved|denied); else the reason it cannot be decided."""

        def run(conn: Connection) -> ApprovalRecord | str:
            row = conn.execute(APPROVALS.select().where(APPROVALS.c.id == approval_id)).first()
            if row is None:
                return "not_found"
            now = now_ms()
            if row.status == "pending" and row.expires_ms <= now:
                self._set_approval(conn, approval_id, "pending", "expired", None, None, now)
                return "expired"
            if row.status != "pending":
                return str(row.status)
            self._set_approval(conn, approval_id, "pending", verdict, by, comment, now)
            updated = conn.execute(APPROVALS.select().where(APPROVALS.c.id == approval_id)).first()
            return _approval(updated)

        return await self._write(run)

    def _set_approval(
        self,
        conn: Connection,
        approval_id: str,
        from_status: str,
        to_status: str,
        by: str | None,
        comment: str | None,
        now: int,
    ) -> bool:
        values: dict[str, Any] = {"status": to_status}
        if by is not None:
            values.update(decided_by=by, decided_ms=now, comment=comment)
        result = conn.execute(
            APPROVALS.update()
            .where(APPROVALS.c.id == approval_id, APPROVALS.c.status == from_status)
            .values(**values)
        )
        return bool(result.rowcount)

    async def withdraw_approval(self, approval_id: str) -> bool:
        """pending → withdrawn: the call it was for was cancelled."""

        def run(conn: Connection) -> bool:
            return self._set_approval(conn, approval_id, "pending", "withdrawn", None, None, 0)

        return await self._write(run)

    async def resume(self, execution_id: str, approval_id: str, events: Sequence[Event]) -> bool:
        """Spend the approval (approved → used) and mark the parked execution running, in one
        transaction; False when the approval was already spent or never approved."""

        def run(conn: Connection) -> bool:
            if not self._set_approval(conn, approval_id, "approved", "used", None, None, 0):
                return False
            moved = conn.execute(
                EXECUTIONS.update()
                .where(
                    EXECUTIONS.c.id == execution_id,
                    EXECUTIONS.c.status == Status.AWAITING_APPROVAL.value,
                )
                .values(status=Status.RUNNING.value, owner=INSTANCE_ID, updated_ms=now_ms())
            )
            if not moved.rowcount:
                raise _Abort(False)  # cancelled while parked: the approval stays unspent
            self._insert_events(conn, events)
            return True

        return await self._write(run)

    async def expired_approvals(self) -> list[ApprovalRecord]:
        """Mark every pending approval past its expiry as expired; returns those it marked."""

        def run(conn: Connection) -> list[ApprovalRecord]:
            now = now_ms()
            rows = conn.execute(
                APPROVALS.select().where(
                    APPROVALS.c.status == "pending", APPROVALS.c.expires_ms <= now
                )
            ).all()
            marked = []
            for row in rows:
                if self._set_approval(conn, row.id, "pending", "expired", None, None, now):
                    marked.append(replace(_approval(row), status="expired"))
            return marked

        return await self._write(run)

    async def release_claim(self, execution_id: str) -> None:
        """Forget the idempotency key of ``execution_id`` so the key can be used again."""
        await self._write(
            lambda conn: conn.execute(
                IDEMPOTENCY.delete().where(IDEMPOTENCY.c.execution_id == execution_id)
            )
        )

    async def sweep_idempotency(self) -> int:
        """Delete idempotency records past their expiry; returns how many."""

        def run(conn: Connection) -> int:
            result = conn.execute(IDEMPOTENCY.delete().where(IDEMPOTENCY.c.expires_ms <= now_ms()))
            return int(result.rowcount)

        return await self._write(run)

    async def recent_usage(
        self, principal: str, workspace_id: str, risk: str, since_ms: int
    ) -> tuple[int, int | None]:
        """(how many, oldest created_ms) of the executions of ``principal`` in
        ``workspace_id`` at ``risk`` created since ``since_ms``: what quotas count."""

        def run(conn: Connection) -> tuple[int, int | None]:
            query = sa.select(sa.func.count(), sa.func.min(EXECUTIONS.c.created_ms)).where(
                EXECUTIONS.c.principal == principal,
                EXECUTIONS.c.workspace_id == workspace_id,
                EXECUTIONS.c.risk == risk,
                EXECUTIONS.c.created_ms >= since_ms,
            )
            count, oldest = conn.execute(query).one()
            return int(count), (int(oldest) if oldest is not None else None)

        return await self._read(run)

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        def run(conn: Connection) -> ApprovalRecord | None:
            row = conn.execute(APPROVALS.select().where(APPROVALS.c.id == approval_id)).first()
            return _approval(row) if row else None

        return await self._read(run)

    async def list_approvals(self, status: str | None, limit: int = 100) -> list[ApprovalRecord]:
        def run(conn: Connection) -> list[ApprovalRecord]:
            query = APPROVALS.select().order_by(APPROVALS.c.requested_ms.desc()).limit(limit)
            if status is not None:
                query = query.where(APPROVALS.c.status == status)
            return [_approval(row) for row in conn.execute(query)]

        return await self._read(run)


_TABLES = [
    EXECUTIONS,
    EVENTS,
    IDEMPOTENCY,
    LOCKS,
    FENCES,
    APPROVALS,
    VERSION,
]


def _status(record: ExecutionRecord) -> dict[str, str]:
    return {"status": record.status.value}


def _execution(row: Any) -> ExecutionRecord:
    data = dict(row._mapping)
    data["status"] = Status(data["status"])
    return ExecutionRecord(**data)


def _approval(row: Any) -> ApprovalRecord:
    data = dict(row._mapping)
    data["reasons"] = tuple(json.loads(data.pop("reasons_json")))
    data["arguments"] = json.loads(data.pop("arguments_json"))
    data["preview"] = json.loads(data.pop("preview_json"))
    return ApprovalRecord(**data)
