"""Usage: what quotas count (the executions of one actor in a window)."""

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
