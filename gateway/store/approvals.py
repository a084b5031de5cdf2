"""Approvals: parking a call for a person's decision, the decision, and spending it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from gateway.events.model import Event
from gateway.store import events as event_log
from gateway.store import rows
from gateway.store.locks import release_locks
from gateway.store.outbox import Notices, emit
from gateway.store.records import (
    ApprovalDecision,
    ApprovalEdit,
    ApprovalRecord,
    Decided,
    Refused,
)
from gateway.store.sql import Abort, Db, Sql, now_ms

INSERT_APPROVAL = Sql(
    f"INSERT INTO approvals ({rows.APPROVAL_COLUMNS}) VALUES ({', '.join('?' * 17)})"
)
APPROVAL_BY_ID = Sql(f"{rows.SELECT_APPROVAL} WHERE a.id = ?")
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
EDIT_APPROVAL = Sql(
    "UPDATE approvals SET arguments_json = ?, arguments_sha256 = ?, preview_json = ? "
    "WHERE id = ? AND status = 'approved'"
)
EDIT_REQUEST = Sql(
    "UPDATE executions SET request_json = ? WHERE id = ? AND status = 'awaiting_approval'"
)
# A resume interrupted before its side effect began: the call waits again, approved.
UNSPEND_APPROVAL = Sql(
    "UPDATE approvals SET status = 'approved' WHERE id = ? AND execution_id = ? AND status = 'used'"
)
REPARK_RESUMED = Sql(
    "UPDATE executions SET status = 'awaiting_approval', owner = NULL, updated_ms = ? "
    "WHERE id = ? AND approval_id = ? AND status = 'running' AND COALESCE(owner, '') = ?"
)
STARTED = Sql("SELECT 1 FROM events WHERE execution_id = ? AND type = 'tool.started' LIMIT 1")
EXPIRED_APPROVALS = Sql(f"{rows.SELECT_APPROVAL} WHERE a.status = 'pending' AND a.expires_ms <= ?")
UNRESUMED = Sql(
    f"{rows.SELECT_APPROVAL} WHERE a.status = 'approved' AND a.decided_ms < ? AND a.id IN "
    "(SELECT x.approval_id FROM executions x WHERE x.status = 'awaiting_approval')"
)


def spend(db: Db, approval_id: str) -> bool:
    """approved → used; False when it was not approved (used, expired, denied)."""
    return bool(db.run(SET_APPROVAL, ("used", approval_id, "approved")))


def request(db: Db, approval: ApprovalRecord, notices: Notices | None) -> None:
    """Write a new pending approval, and its ``approval.requested`` notifications."""
    db.run(INSERT_APPROVAL, rows.approval_row(approval))
    emit(db, notices, "approval.requested", approval)


def checkpoint_for_approval(
    db: Db, approval: ApprovalRecord, events: Sequence[Event], notices: Notices | None = None
) -> None:
    request(db, approval, notices)
    db.run(PARK_EXECUTION, (approval.id, now_ms(), approval.execution_id))
    release_locks(db, approval.execution_id)
    event_log.insert(db, events)


def decide_approval(
    db: Db,
    approval_id: str,
    verdict: str,
    by: str,
    comment: str | None,
    edit: ApprovalEdit | None = None,
    notices: Notices | None = None,
) -> ApprovalDecision:
    row = db.one(APPROVAL_BY_ID, (approval_id,))
    if row is None:
        return Refused("not_found")
    found = rows.approval(row)
    now = now_ms()
    if found.status != "pending":
        return Refused(found.status)
    if found.expires_ms <= now:
        if db.run(SET_APPROVAL, ("expired", approval_id, "pending")):
            emit(db, notices, "approval.expired", replace(found, status="expired"))
        return Refused("expired")
    if not db.run(STILL_PARKED, (now, found.execution_id)):
        _withdraw(db, found, notices)
        return Refused("withdrawn")
    decided = db.run(DECIDE_APPROVAL, (verdict, by, now, comment, approval_id, "pending"))
    if decided and edit is not None:
        _apply_edit(db, found, edit)
    after = rows.approval(db.one(APPROVAL_BY_ID, (approval_id,)))
    if not decided:
        return Refused(after.status)  # another decision came first
    emit(db, notices, f"approval.{verdict}", after)
    return Decided(after)


def _apply_edit(db: Db, approval: ApprovalRecord, edit: ApprovalEdit) -> None:
    """The approval binds the edited arguments; the parked execution will run them."""
    arguments = json.dumps(edit.arguments, default=str)
    preview = json.dumps(edit.preview, default=str)
    db.run(EDIT_APPROVAL, (arguments, edit.arguments_sha256, preview, approval.id))
    db.run(EDIT_REQUEST, (edit.request_json, approval.execution_id))
    event_log.insert(db, [edit.event], unseen=True)


def withdraw_approval(db: Db, approval_id: str, notices: Notices | None = None) -> int:
    """pending → withdrawn, and its ``approval.withdrawn`` notifications."""
    row = db.one(APPROVAL_BY_ID, (approval_id,))
    return 0 if row is None else _withdraw(db, rows.approval(row), notices)


def _withdraw(db: Db, approval: ApprovalRecord, notices: Notices | None) -> int:
    """``approval``, pending, is withdrawn: the endpoints told it was requested are told it
    is gone, in this transaction."""
    withdrawn = db.run(SET_APPROVAL, ("withdrawn", approval.id, "pending"))
    if withdrawn:
        emit(db, notices, "approval.withdrawn", replace(approval, status="withdrawn"))
    return withdrawn


def resume(
    db: Db, execution_id: str, approval_id: str, events: Sequence[Event], owner: str
) -> bool:
    if not spend(db, approval_id):
        return False
    if not db.run(RESUME_EXECUTION, (owner, now_ms(), execution_id)):
        raise Abort(False)  # cancelled while parked: the approval stays unspent
    event_log.insert(db, events)
    return True


def unresume(
    db: Db, execution_id: str, approval_id: str, events: Sequence[Event], owner: str | None
) -> bool:
    """Undo ``resume`` for a call that never began its side effect (its replica, ``owner``,
    died): running → awaiting_approval, the approval used → approved, the call's locks
    released; False (nothing changed) unless the call still runs for ``owner`` on that spent
    approval without ``tool.started``. Its row is locked first, as in
    ``executions.take_over``: a second recovery that found the same owner gone, after a
    resume elsewhere ran it, changes nothing."""
    if not db.run(REPARK_RESUMED, (now_ms(), execution_id, approval_id, owner or "")):
        return False
    if db.one(STARTED, (execution_id,)) is not None:
        raise Abort(False)
    if not db.run(UNSPEND_APPROVAL, (approval_id, execution_id)):
        raise Abort(False)
    release_locks(db, execution_id)
    event_log.insert(db, events)
    return True


def expired_approvals(db: Db, notices: Notices | None = None) -> list[ApprovalRecord]:
    marked = []
    for row in db.all(EXPIRED_APPROVALS, (now_ms(),)):
        found = rows.approval(row)
        if db.run(SET_APPROVAL, ("expired", found.id, "pending")):
            marked.append(replace(found, status="expired"))
            emit(db, notices, "approval.expired", marked[-1])
    return marked


def unresumed(db: Db, decided_before_ms: int) -> list[ApprovalRecord]:
    """Approvals approved before ``decided_before_ms`` whose call still waits, parked: the
    replica that took the decision stopped before it resumed the call."""
    return [rows.approval(row) for row in db.all(UNRESUMED, (decided_before_ms,))]


def get_approval(db: Db, approval_id: str) -> ApprovalRecord | None:
    row = db.one(APPROVAL_BY_ID, (approval_id,))
    return rows.approval(row) if row else None


def list_approvals(
    db: Db,
    status: str | None,
    limit: int,
    run_id: str | None = None,
    call_id: str | None = None,
    seen_by: str | None = None,
) -> list[ApprovalRecord]:
    """The newest approvals (at most ``limit``) in ``status``, of the calls ``run_id`` and
    ``call_id`` name (None: any). ``seen_by``: only those this principal may be shown as the
    requester or as one of the approver roles the decision named (the caller checks the
    roles); None: everyone's."""
    where, params = [], []
    for column, value in (("a.status", status), ("e.run_id", run_id), ("e.call_id", call_id)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if seen_by is not None:
        where.append("(a.principal = ? OR a.approver_roles_json IS NOT NULL)")
        params.append(seen_by)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = f"{rows.SELECT_APPROVAL}{clause} ORDER BY a.requested_ms DESC LIMIT ?"
    return [rows.approval(row) for row in db.all(sql, (*params, int(limit)))]
