"""Replicas: each gateway process's row and lease, renewed by its heartbeat.

An execution's ``owner`` is a replica's id. While the replica's lease is current, its
executions are its own; once the lease has passed (it stopped heartbeating, or it left),
recovery on another replica settles them (``gateway.runtime.recovery``).
"""

from __future__ import annotations

from gateway.store.records import ReplicaRecord
from gateway.store.sql import Db, Sql, now_ms

COLUMNS = "id, node, host, pid, started_ms, heartbeat_ms, lease_until_ms"
BEAT = Sql(
    f"INSERT INTO replicas ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE "
    "SET heartbeat_ms = excluded.heartbeat_ms, lease_until_ms = excluded.lease_until_ms"
)
LEAVE = Sql("UPDATE replicas SET lease_until_ms = 0 WHERE id = ?")
ALL = Sql(f"SELECT {COLUMNS} FROM replicas")
PRUNE = Sql(
    "DELETE FROM replicas WHERE lease_until_ms < ? AND NOT EXISTS (SELECT 1 FROM executions "
    "WHERE executions.owner = replicas.id AND status IN ('running', 'cancelling'))"
)


def beat(db: Db, replica: ReplicaRecord, lease_ms: int) -> None:
    """Renew ``replica``'s lease for ``lease_ms`` from now (its row is made at the first)."""
    now = now_ms()
    db.run(
        BEAT,
        (
            replica.id,
            replica.node,
            replica.host,
            replica.pid,
            replica.started_ms,
            now,
            now + lease_ms,
        ),
    )


def leave(db: Db, replica_id: str) -> None:
    """Give the lease up at once: whatever the replica still owns is anyone's to settle."""
    db.run(LEAVE, (replica_id,))


def replicas(db: Db) -> dict[str, ReplicaRecord]:
    return {row[0]: ReplicaRecord(*row) for row in db.all(ALL)}


def prune(db: Db, before_ms: int) -> int:
    """Forget replicas whose lease ended before ``before_ms`` and that own nothing unsettled."""
    return db.run(PRUNE, (before_ms,))
