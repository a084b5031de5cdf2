"""Executions: reserving a call before its side effect, moving its status, committing it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

from gateway.errors import StoreError
from gateway.events.chain import GENESIS
from gateway.events.model import Event
from gateway.store import events as event_log
from gateway.store import idempotency, rows
from gateway.store.approvals import request, spend
from gateway.store.locks import RELEASE_LOCKS, release_locks
from gateway.store.outbox import Notices
from gateway.store.records import (
    ApprovalRecord,
    ApprovalUnavailable,
    CallIdentity,
    ExecutionRecord,
    Existing,
    IdempotencyClaim,
    Reserved,
    ReserveResult,
    RunMember,
    call_identity,
)
from gateway.store.sql import Abort, Db, Dialect, Sql, now_ms, placeholders
from gateway.types import Status

INSERT_EXECUTION = Sql(
    f"INSERT INTO executions ({rows.EX_COLS}) VALUES ({placeholders(len(rows.EXECUTION_COLUMNS))})"
)
INSERT_EXECUTION_IF_NEW = Sql(
    f"{INSERT_EXECUTION.qmark} ON CONFLICT (principal, run_id, call_id) DO NOTHING"
)
"""Nothing inserted (no row changed) when the call (principal, run_id, call_id) is stored."""


@cache
def _complete(events: int) -> Sql:
    """Where a WITH may write (PostgreSQL): a completed call's whole record in one statement,
    one round trip: the release of its holder's locks (the execution's id), the execution
    if its call (principal, run_id, call_id) is new, and then only its first ``events``
    events. Its one row counts the executions inserted (0: the call is stored)."""
    logged = ""
    if events:
        values = ", ".join([event_log.EVENT_ROW] * events)
        logged = (
            f", logged AS (INSERT INTO events ({rows.CHAINED_EVENT_COLUMNS}) "
            f"SELECT * FROM (VALUES {values}) AS e WHERE EXISTS (SELECT 1 FROM inserted) "
            "ON CONFLICT (id) DO NOTHING)"
        )
    return Sql(
        f"WITH released AS ({RELEASE_LOCKS.qmark}), "
        f"inserted AS ({INSERT_EXECUTION_IF_NEW.qmark} RETURNING id){logged} "
        "SELECT count(*) FROM inserted"
    )


EXECUTION_BY_ID = Sql(f"{rows.SELECT_EXECUTION} WHERE id = ?")
EXECUTION_BY_CALL = Sql(
    f"{rows.SELECT_EXECUTION} WHERE principal = ? AND run_id = ? AND call_id = ?"
)
HEARTBEAT = Sql("UPDATE executions SET updated_ms = ? WHERE id = ?")
COMMIT_EXECUTION = Sql(
    "UPDATE executions SET status = 'completed', outcome = ?, result_json = ?, "
    "fencing_json = ?, updated_ms = ? WHERE id = ? AND status <> 'completed'"
)
RESOLVE_OUTCOME = Sql(
    "UPDATE executions SET outcome = ?, result_json = ?, updated_ms = ? "
    "WHERE id = ? AND outcome = ?"
)
CLAIM_QUEUED = "SELECT id FROM executions WHERE status = 'queued'"
TAKE_QUEUED = Sql(
    "UPDATE executions SET status = 'running', owner = ?, updated_ms = ? WHERE id = ?"
)
BY_CANCELLATION_TOKEN = Sql(
    f"{rows.SELECT_EXECUTION} WHERE principal = ? AND cancellation_token = ? "
    "AND status <> 'completed'"
)


@cache
def _set_status(count: int, owned: bool = False) -> Sql:
    return Sql(
        "UPDATE executions SET status = ?, updated_ms = ? WHERE id = ? "
        f"AND status IN ({placeholders(count)}){' AND owner = ?' if owned else ''}"
    )


TAKE_OVER = Sql(
    "UPDATE executions SET status = ?, owner = ?, updated_ms = ? WHERE id = ? "
    "AND status IN ('running', 'cancelling') AND COALESCE(owner, '') = ?"
)
"""Recovery takes an execution from the owner it found gone, only while that one still owns
it (the row locked from here to the COMMIT: the owner's own writes wait, or came first)."""
STARTED = Sql("SELECT 1 FROM events WHERE execution_id = ? AND type = 'tool.started' LIMIT 1")


@cache
def _unfinished(count: int) -> Sql:
    return Sql(
        f"{rows.SELECT_EXECUTION} WHERE status IN ({placeholders(count)}) ORDER BY created_ms"
    )


@cache
def _claim_queued(dialect: Dialect, avoided: int = 0) -> Sql:
    avoid = f" AND principal NOT IN ({placeholders(avoided)})" if avoided else ""
    return Sql(f"{CLAIM_QUEUED}{avoid} ORDER BY created_ms LIMIT 1{dialect.skip_locked}")


def get_execution(db: Db, execution_id: str) -> ExecutionRecord | None:
    row = db.one(EXECUTION_BY_ID, (execution_id,))
    return rows.execution(row) if row else None


def find_executions(
    db: Db, principal: str | None, run_id: str | None, call_id: str | None, limit: int
) -> list[ExecutionRecord]:
    where, params = [], []
    for column, value in (("principal", principal), ("run_id", run_id), ("call_id", call_id)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = f"{rows.SELECT_EXECUTION}{clause} ORDER BY created_ms DESC LIMIT ?"
    return [rows.execution(row) for row in db.all(sql, (*params, int(limit)))]


RUN_MEMBERS = Sql(
    "SELECT id, principal, status, outcome, created_ms, "
    "(SELECT MAX(seq) FROM events WHERE execution_id = x.id) "
    "FROM executions x WHERE run_id = ? ORDER BY created_ms DESC LIMIT ?"
)
"""Each execution's last seq read off the end of its events' index (uq_event_seq)."""


def run_members(db: Db, run_id: str, limit: int) -> list[RunMember]:
    """The newest ``limit`` executions of ``run_id``, newest first."""
    found = db.all(RUN_MEMBERS, (run_id, int(limit)))
    return [RunMember(r[0], r[1], Status(r[2]), r[3], r[4], r[5]) for r in found]


def same_call(
    db: Db, principal: str, run_id: str, call_id: str, payload_sha256: str
) -> Existing | None:
    row = db.one(EXECUTION_BY_CALL, (principal, run_id, call_id))
    if row is None:
        return None
    found = rows.execution(row)
    return Existing(found, "call_id", found.payload_sha256 == payload_sha256)


def insert_completed(db: Db, record: ExecutionRecord, events: Sequence[Event]) -> ReserveResult:
    # The insert first: the same call already stored is the rare case, and a statement (a
    # round trip on PostgreSQL) is saved in the common one; where a WITH may write, the
    # release of the call's locks and the events go with it, in one statement.
    row = rows.execution_row(record)
    if db.dialect.writing_ctes:
        chained = rows.chained_rows(events, 0, GENESIS)
        first, rest = chained[: event_log.ROWS_PER_INSERT], chained[event_log.ROWS_PER_INSERT :]
        params = (record.id, *row, *(value for event in first for value in event))
        inserted = db.one(_complete(len(first)), params)[0]
    else:
        inserted = db.run(INSERT_EXECUTION_IF_NEW, row)
        release_locks(db, record.id)
        rest = rows.chained_rows(events, 0, GENESIS)
    if not inserted:
        existing = same_call(db, *call_identity(record))
        if existing is None:
            raise StoreError("the execution conflicted with its call but none was found")
        return existing
    event_log.insert_rows(db, rest)
    return Reserved()


def reserve(
    db: Db,
    identity: CallIdentity,
    record: ExecutionRecord | Callable[[], ExecutionRecord],
    events: Sequence[Event],
    claim: IdempotencyClaim | None,
    consume_approval: str | None,
    on_existing: Callable[[Existing], Sequence[Event]] | None,
    approval: ApprovalRecord | None = None,
    notices: Notices | None = None,
) -> ReserveResult:
    # Call identity answers first (docs/api.md, "Which answer comes first"): an identical
    # resend gets its own execution as it stands; a reused call_id is refused whatever its
    # key says. Only then does the key resolve to another call's result.
    same = same_call(db, *identity)
    if same is not None:
        return same
    if claim is not None:
        existing = idempotency.claimed(db, claim)
        if existing is not None:
            if on_existing is not None:  # its events are made now: none is known
                event_log.insert(db, on_existing(existing), unseen=True)
            return existing
    if callable(record):
        record = record()
    if consume_approval is not None and not spend(db, consume_approval):
        raise Abort(ApprovalUnavailable())
    db.run(INSERT_EXECUTION, rows.execution_row(record))
    if claim is not None:
        idempotency.insert(db, claim, record.id)
    if approval is not None:
        request(db, approval, notices)
    event_log.insert(db, events, fresh=True)
    return Reserved()


def winner(db: Db, identity: CallIdentity, claim: IdempotencyClaim | None) -> ReserveResult:
    """The reservation another replica made first, between our read and our insert."""
    found = same_call(db, *identity) or (idempotency.claimed(db, claim) if claim else None)
    if found is None:
        raise StoreError("the reservation conflicted but no winner was found; try again")
    return found


def set_status(
    db: Db,
    execution_id: str,
    from_statuses: Sequence[Status],
    to: Status,
    events: Sequence[Event],
    owner: str | None = None,
) -> bool:
    params: tuple[object, ...] = (
        to.value,
        now_ms(),
        execution_id,
        *(s.value for s in from_statuses),
    )
    if owner is not None:
        params = (*params, owner)
    if not db.run(_set_status(len(from_statuses), owner is not None), params):
        return False
    event_log.insert(db, events)
    return True


def move_status(
    db: Db, execution_id: str, from_statuses: Sequence[Status], to: Status, events: Sequence[Event]
) -> ExecutionRecord | None:
    """``set_status``, and the execution as it then stands, read in the same transaction;
    None when it was not moved."""
    if not set_status(db, execution_id, from_statuses, to, events):
        return None
    return get_execution(db, execution_id)


def take_over(
    db: Db,
    execution_id: str,
    owner: str | None,
    to: Status,
    new_owner: str | None,
    events: Sequence[Event],
) -> bool:
    """Move an execution that never began its side effect out of the hands of ``owner``
    (gone, as recovery found it): to ``to``, owned by ``new_owner``. False, and nothing
    changed, when it has another owner by now (another replica took it over first, and a
    worker may run it), is no longer running or cancelling, or has ``tool.started``: its
    side effect may have begun, so it is never run again (recovery settles it instead).

    One transaction, the execution's row locked first: an owner still alive (a lease ran
    out under a long pause) that writes ``tool.started`` either committed it before (seen
    here, on PostgreSQL by the statement after the lock) or finds the row moved and does
    not start (``set_status`` with its ``owner``)."""
    if not db.run(TAKE_OVER, (to.value, new_owner, now_ms(), execution_id, owner or "")):
        return False
    if db.one(STARTED, (execution_id,)) is not None:
        raise Abort(False)
    event_log.insert(db, events)
    return True


def resolve_outcome(
    db: Db, execution_id: str, from_outcome: str, outcome: str, result_json: str, event: Event
) -> bool:
    params = (outcome, result_json, now_ms(), execution_id, from_outcome)
    if not db.run(RESOLVE_OUTCOME, params):
        return False
    event_log.insert(db, [event])
    return True


def gauges(db: Db) -> tuple[int, int]:
    """(pending approvals, queued executions)."""
    pending = db.one("SELECT COUNT(*) FROM approvals WHERE status = ?", ("pending",))
    queued = db.one("SELECT COUNT(*) FROM executions WHERE status = ?", ("queued",))
    return int(pending[0]), int(queued[0])


def heartbeat(db: Db, execution_id: str) -> None:
    db.run(HEARTBEAT, (now_ms(), execution_id))


def unfinished(db: Db, statuses: Sequence[Status]) -> list[ExecutionRecord]:
    found = db.all(_unfinished(len(statuses)), [s.value for s in statuses])
    return [rows.execution(row) for row in found]


def claim_queued(db: Db, owner: str, avoid: Sequence[str] = ()) -> ExecutionRecord | None:
    found = db.one(_claim_queued(db.dialect, len(avoid)), tuple(avoid))
    if found is None:
        return None
    db.run(TAKE_QUEUED, (owner, now_ms(), found[0]))
    return rows.execution(db.one(EXECUTION_BY_ID, (found[0],)))


def find_by_cancellation_token(db: Db, principal: str, token: str) -> list[ExecutionRecord]:
    return [rows.execution(row) for row in db.all(BY_CANCELLATION_TOKEN, (principal, token))]


def commit(
    db: Db,
    execution_id: str,
    outcome: str,
    result_json: str,
    events: Sequence[Event],
    fencing_json: str | None,
) -> bool:
    params = (outcome, result_json, fencing_json, now_ms(), execution_id)
    if not db.run(COMMIT_EXECUTION, params):
        return False
    idempotency.committed(db, execution_id)
    release_locks(db, execution_id)
    event_log.insert(db, events)
    return True
