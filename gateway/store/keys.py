"""Revoked API keys: one row per key id, read on every authenticated request.

A key is named by its id (``principals[].keys[].id`` in toolgate.yaml), never by its secret.
Every replica reads this table itself, in the request it authenticates, so a revocation is
in force everywhere as soon as its transaction commits: there is no cache to wait out.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.store.sql import Db, Sql, now_ms

IS_REVOKED = Sql("SELECT 1 FROM revoked_keys WHERE key_id = ?")
INSERT = Sql(
    "INSERT INTO revoked_keys (key_id, revoked_ms, revoked_by, reason) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key_id) DO NOTHING"
)
DELETE = Sql("DELETE FROM revoked_keys WHERE key_id = ?")
ALL = Sql("SELECT key_id, revoked_ms, revoked_by, reason FROM revoked_keys ORDER BY key_id")


@dataclass(frozen=True, slots=True)
class Revocation:
    key_id: str
    revoked_ms: int
    revoked_by: str
    reason: str


def is_revoked(db: Db, key_id: str) -> bool:
    return db.one(IS_REVOKED, (key_id,)) is not None


def revoke(db: Db, key_id: str, by: str, reason: str) -> bool:
    """Revoke ``key_id``; False if it already was (the first revocation is kept)."""
    return db.run(INSERT, (key_id, now_ms(), by, reason)) == 1


def unrevoke(db: Db, key_id: str) -> bool:
    """Take a revocation back; False if there was none."""
    return db.run(DELETE, (key_id,)) == 1


def revocations(db: Db) -> list[Revocation]:
    return [Revocation(str(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in db.all(ALL)]
