"""Usage: what quotas count (the executions of one actor in a window) and what the bounds on
load count (queued calls, pending approvals: gateway/runtime/admission.py)."""

from __future__ import annotations

from gateway.store.sql import Db, Sql

# Both walk ix_executions_quota from the start of the window: the count stops at the limit
# (an actor far over it must not make each of its calls slower), the oldest is one row.
_IN_WINDOW = (
    "FROM executions WHERE principal = ? AND workspace_id = ? AND risk = ? AND created_ms >= ?"
)
RECENT_COUNT = Sql(f"SELECT count(*) FROM (SELECT 1 {_IN_WINDOW} LIMIT ?) AS recent")
OLDEST_RECENT = Sql(f"SELECT created_ms {_IN_WINDOW} ORDER BY created_ms LIMIT 1")


def recent_usage(
    db: Db, principal: str, workspace_id: str, risk: str, since_ms: int, limit: int
) -> tuple[int, int | None]:
    window = (principal, workspace_id, risk, since_ms)
    (count,) = db.one(RECENT_COUNT, (*window, max(limit, 0)))
    oldest = db.one(OLDEST_RECENT, window) if count else None
    return int(count), (int(oldest[0]) if oldest else None)


# Each count stops at its bound (LIMIT), walking ix_executions_status / the approvals' status
# index: a principal far over a bound makes no count slower.
QUEUED_OF = Sql(
    "SELECT count(*) FROM (SELECT 1 FROM executions WHERE status = 'queued' AND principal = ? "
    "LIMIT ?) AS mine"
)
QUEUED_ALL = Sql(
    "SELECT count(*) FROM (SELECT 1 FROM executions WHERE status = 'queued' LIMIT ?) AS everyone"
)
PENDING_APPROVALS_OF = Sql(
    "SELECT count(*) FROM (SELECT 1 FROM approvals WHERE status = 'pending' AND principal = ? "
    "AND expires_ms > ? LIMIT ?) AS pending"
)


def queued_counts(db: Db, principal: str, share: int, total: int) -> tuple[int, int]:
    """(``principal``'s queued executions, up to ``share``; everyone's, up to ``total``)."""
    (mine,) = db.one(QUEUED_OF, (principal, max(share, 0)))
    (everyone,) = db.one(QUEUED_ALL, (max(total, 0),))
    return int(mine), int(everyone)


def pending_approvals(db: Db, principal: str, now_ms: int, limit: int) -> int:
    """How many of ``principal``'s approval requests are pending and unexpired, up to ``limit``."""
    (count,) = db.one(PENDING_APPROVALS_OF, (principal, now_ms, max(limit, 0)))
    return int(count)
