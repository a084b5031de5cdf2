"""Locks: leases on keys, all or none per call, each grant with a fencing token."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.store.records import LockBusy, LockRequest
from gateway.store.sql import Abort, Db, Sql, now_ms
from gateway.types import LockMode

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
# SQLite (no writing WITH) looks first for the row that could stop the grant: another
# holder's on the key that conflicts or whose lease ran out, the one ending first. Only when
# that one has run out does it remove the expired rows and look again, so a grant with no
# expired lease in its way is one statement fewer (expired leases are rare: a holder that
# died). The shared form also finds an expired shared row, which the expiry removes.
_BLOCKER = (
    'SELECT holder, holder_call_id, lease_until_ms FROM locks WHERE "key" = ? AND holder <> ?'
)
FIRST_BLOCKER_EXCLUSIVE = Sql(f"{_BLOCKER} ORDER BY lease_until_ms LIMIT 1")
FIRST_BLOCKER_SHARED = Sql(
    f"{_BLOCKER} AND (mode = 'exclusive' OR lease_until_ms < ?) ORDER BY lease_until_ms LIMIT 1"
)


# Where a WITH may write (Dialect.writing_ctes: PostgreSQL), a grant is one statement after
# its advisory lock instead of four, each a round trip: the expiry of the others' leases that
# ran out, the conflict check (the SELECT sees the rows as they were before the DELETE, so
# it leaves out the expired ones itself), and, only when nothing is in the way, the next
# fence with the grant (the grant takes the fence's RETURNING). The holder's own row is
# renewed by the grant, never deleted by the same statement (a row is changed once in one).
# The advisory lock stays a statement of its own: a statement's snapshot is taken before
# anything in it runs, and the check must see every grant committed before the lock was had.
def _grant(shared: bool) -> Sql:
    mode = " AND mode = 'exclusive'" if shared else ""
    return Sql(
        'WITH expired AS (DELETE FROM locks WHERE "key" = ? AND lease_until_ms < ? '
        "AND holder <> ?), "
        'busy AS (SELECT holder, holder_call_id FROM locks WHERE "key" = ? AND holder <> ? '
        f"AND lease_until_ms >= ?{mode} LIMIT 1), "
        'fence AS (INSERT INTO lock_fences ("key", last_token) SELECT ?, 1 '
        "WHERE NOT EXISTS (SELECT 1 FROM busy) "
        'ON CONFLICT ("key") DO UPDATE SET last_token = lock_fences.last_token + 1 '
        "RETURNING last_token), "
        'granted AS (INSERT INTO locks ("key", holder, holder_call_id, mode, token, '
        "lease_until_ms) SELECT ?, ?, ?, ?, last_token, ? FROM fence "
        'ON CONFLICT ("key", holder) DO UPDATE SET '
        "holder_call_id = excluded.holder_call_id, mode = excluded.mode, "
        "token = excluded.token, lease_until_ms = excluded.lease_until_ms RETURNING token) "
        "SELECT busy.holder, busy.holder_call_id, (SELECT token FROM granted) "
        "FROM (SELECT 1) AS one LEFT JOIN busy ON true"
    )


GRANT_SHARED, GRANT_EXCLUSIVE = _grant(True), _grant(False)
WAITER_CANCELLED = Sql("SELECT 1 FROM executions WHERE id = ? AND status = 'cancelling'")
RENEW_LOCKS = Sql("UPDATE locks SET lease_until_ms = ? WHERE holder = ?")
RELEASE_LOCKS = Sql("DELETE FROM locks WHERE holder = ?")


def try_acquire(
    db: Db, holder: str, holder_call_id: str, ordered: Sequence[LockRequest], lease_s: float
) -> dict[str, int] | LockBusy:
    """Take every lock in ``ordered`` (sorted by key) or none."""
    tokens: dict[str, int] = {}
    now = now_ms()
    lease_until = now + int(lease_s * 1000)
    merged = db.dialect.writing_ctes
    for req in ordered:
        key, shared = req.key, req.mode is LockMode.SHARED
        db.advisory_lock("lock:" + key)
        grant = (key, holder, holder_call_id, req.mode.value)
        if merged:
            params = (key, now, holder, key, holder, now, key, *grant, lease_until)
            busy_holder, busy_call, token = db.one(
                GRANT_SHARED if shared else GRANT_EXCLUSIVE, params
            )
            busy = None if busy_holder is None else (busy_holder, busy_call)
        else:
            if shared:
                busy = db.one(FIRST_BLOCKER_SHARED, (key, holder, now))
            else:
                busy = db.one(FIRST_BLOCKER_EXCLUSIVE, (key, holder))
            if busy is not None and busy[2] < now:  # a lease ran out: remove, look again
                db.run(EXPIRE_LOCK, (key, now))
                busy = db.one(
                    LOCK_CONFLICT_SHARED if shared else LOCK_CONFLICT_EXCLUSIVE, (key, holder)
                )
        if busy is not None:
            # A cancel from any process is seen here: the waiter polls anyway.
            cancelled = db.one(WAITER_CANCELLED, (holder,)) is not None
            raise Abort(LockBusy(key, busy[0], busy[1], cancelled))  # roll back
        if not merged:
            token = db.one(NEXT_FENCE, (key,))[0]
            db.run(UPSERT_LOCK, (*grant, token, lease_until))
        tokens[key] = int(token)
    return tokens


def renew_locks(db: Db, holder: str, lease_s: float) -> int:
    return db.run(RENEW_LOCKS, (now_ms() + int(lease_s * 1000), holder))


def release_locks(db: Db, holder: str) -> None:
    db.run(RELEASE_LOCKS, (holder,))
