"""The outbox of approval notifications: one row per (event, endpoint), written in the same
transaction as the approval change it tells of (nothing is lost, nothing is sent for a change
that rolled back), then claimed, sent and settled by the workers of any replica.

A row is ``pending`` until it is ``delivered`` or ``dead`` (dead-lettered: refused, or out
of attempts or age). A claim moves ``due_ms`` past the attempt's deadline and names the
claimer: a replica that dies mid-attempt leaves the row due again once that passes. Claims
skip each other's rows on PostgreSQL (``FOR UPDATE SKIP LOCKED``); on SQLite writes are
serial, and the claim's ``UPDATE`` is a compare-and-swap on the ``due_ms`` it read anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from gateway.store.records import ApprovalRecord
from gateway.store.sql import Db, Dialect, Sql, now_ms

INSERT = Sql(
    "INSERT INTO notifications (id, endpoint, event, approval_id, body, status, attempts, "
    "created_ms, due_ms) VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?)"
)
DUE = "SELECT id, due_ms FROM notifications WHERE status = 'pending' AND due_ms <= ?"
TAKE = Sql(
    "UPDATE notifications SET due_ms = ?, claimed_by = ?, attempts = attempts + 1 "
    "WHERE id = ? AND status = 'pending' AND due_ms = ?"
)
SELECT = Sql(
    "SELECT id, endpoint, event, approval_id, body, attempts, created_ms FROM notifications "
    "WHERE id = ?"
)
SETTLE = Sql(
    "UPDATE notifications SET status = ?, due_ms = ?, last_error = ?, claimed_by = NULL "
    "WHERE id = ? AND status = 'pending' AND claimed_by = ?"
)
COUNTS = Sql("SELECT status, COUNT(*) FROM notifications GROUP BY status")


@dataclass(frozen=True, slots=True)
class Notice:
    """One notification to write: ``id`` is its ``webhook-id``, ``body`` the bytes sent."""

    id: str
    endpoint: str
    event: str
    approval_id: str
    body: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed notification: what one attempt sends (``attempts`` counts this one)."""

    id: str
    endpoint: str
    event: str
    approval_id: str
    body: str
    attempts: int
    created_ms: int


class Notices(Protocol):
    """Makes the notifications of an approval event (``approval.requested``, ...), one per
    endpoint that takes it; called inside the store's transaction, so it only computes."""

    def __call__(self, event: str, approval: ApprovalRecord) -> Sequence[Notice]: ...


def emit(db: Db, notices: Notices | None, event: str, approval: ApprovalRecord) -> None:
    """Write the notifications of ``event`` on ``approval`` in the caller's transaction
    (none when notifications are off)."""
    if notices is None:
        return
    now = now_ms()
    rows = [
        (n.id, n.endpoint, n.event, n.approval_id, n.body, now, now)
        for n in notices(event, approval)
    ]
    if rows:
        db.many(INSERT, rows)


@cache
def _due(dialect: Dialect) -> Sql:
    return Sql(f"{DUE} ORDER BY due_ms LIMIT ?{dialect.skip_locked}")


def claim(db: Db, owner: str, limit: int, lease_ms: int) -> list[Delivery]:
    """Take up to ``limit`` due notifications for ``owner`` until ``lease_ms`` from now."""
    now = now_ms()
    taken = []
    for row_id, due in db.all(_due(db.dialect), (now, int(limit))):
        if db.run(TAKE, (now + lease_ms, owner, row_id, due)):
            taken.append(Delivery(*db.one(SELECT, (row_id,))))
    return taken


def settle(
    db: Db, delivery_id: str, owner: str, status: str, due_ms: int, error: str | None
) -> bool:
    """After an attempt: ``delivered``, ``dead``, or ``pending`` again (due at ``due_ms``);
    False when the claim was no longer ``owner``'s (it ran out and another took it)."""
    return bool(db.run(SETTLE, (status, due_ms, error, delivery_id, owner)))


def counts(db: Db) -> dict[str, int]:
    """Notifications by status."""
    return {status: int(n) for status, n in db.all(COUNTS)}
