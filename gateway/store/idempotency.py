"""Idempotency claims: a key resolves to the execution that first used it, until it expires."""

from __future__ import annotations

from gateway.store import rows
from gateway.store.records import Existing, IdempotencyClaim
from gateway.store.sql import Db, Sql, now_ms

CLAIM_BY_SCOPE = Sql(
    "SELECT i.execution_id, i.arguments_sha256, i.tool_version, i.expires_ms, "
    + ", ".join(f"e.{c}" for c in rows.EXECUTION_COLUMNS)
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


def claimed(db: Db, claim: IdempotencyClaim) -> Existing | None:
    """The execution that holds ``claim``'s key; an expired claim, or one whose execution is
    gone, is deleted and resolves to nothing."""
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
    return Existing(rows.execution(first), "idempotency_key", same)


def insert(db: Db, claim: IdempotencyClaim, execution_id: str) -> None:
    params = (claim.scope, execution_id, claim.arguments_sha256, claim.tool_version)
    db.run(INSERT_CLAIM, (*params, claim.expires_ms))


def committed(db: Db, execution_id: str) -> None:
    db.run(COMMIT_CLAIM, (execution_id,))


def release_claim(db: Db, execution_id: str) -> None:
    db.run(RELEASE_CLAIM, (execution_id,))


def sweep_idempotency(db: Db) -> int:
    return db.run(SWEEP_CLAIMS, (now_ms(),))
