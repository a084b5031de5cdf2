"""Upgrading a store written by an older gateway, in place, when a newer one opens it.

``Store.open_sync`` creates the tables a store lacks; a table that exists keeps its columns,
so each schema version that changes one has a step here, run in the transaction that checks
the version (under a lock: replicas starting together upgrade once). A store newer than the
gateway is refused (``store._check_version``).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.events.chain import GENESIS, event_hash
from gateway.store.sql import Db, Sql

BACKFILL_PAGE = 2000
EVENTS_FROM = Sql(
    "SELECT id, execution_id, seq, type, version, at_ms, data_json FROM events "
    "WHERE (execution_id, seq) > (?, ?) ORDER BY execution_id, seq LIMIT ?"
)
SET_LINK = Sql("UPDATE events SET prev = ?, hash = ? WHERE id = ?")


def _chain_events(db: Db) -> None:
    """Version 2: events carry ``prev`` and ``hash``. The events already there are chained
    as they stand (the audit trail vouches for them from the upgrade on)."""
    db.run("ALTER TABLE events ADD COLUMN prev VARCHAR(64)")
    db.run("ALTER TABLE events ADD COLUMN hash VARCHAR(64)")
    execution, seq, prev = "", -1, GENESIS
    while True:
        page = db.all(EVENTS_FROM, (execution, seq, BACKFILL_PAGE))
        if not page:
            return
        links = []
        for event_id, execution_id, at_seq, type_, version, at_ms, data_json in page:
            if execution_id != execution:
                prev = GENESIS
            digest = event_hash(
                prev, execution_id, at_seq, event_id, type_, version, at_ms, data_json
            )
            links.append((prev, digest, event_id))
            execution, seq, prev = execution_id, at_seq, digest
        db.many(SET_LINK, links)


def _approver_roles(db: Db) -> None:
    """Version 3: an approval keeps the approver roles its decision named. Approvals already
    there named none (``NULL``): policy data's ``approvers`` decide them, as before."""
    db.run("ALTER TABLE approvals ADD COLUMN approver_roles_json TEXT")


def _ended_sessions(db: Db) -> None:
    """Version 4: the ``ended_sessions`` table, new: ``Store.open_sync`` has created it
    before this step runs, and no table that was there changes. The step exists so that the
    version moves (an older gateway, which would not read the table, refuses the store)."""


def _shadow_differences(db: Db) -> None:
    """Version 5: the ``shadow_differences`` table, new (created before this step runs, as
    version 4's); the version moves so that an older gateway refuses the store."""


def _notifications(db: Db) -> None:
    """Version 6: the ``notifications`` table (the outbox of approval notifications), new:
    created by ``Store.open_sync`` before this step runs, as ``ended_sessions`` was. An older
    gateway would change approvals without writing their notifications: it refuses the store."""


def _run_and_call_indexes(db: Db) -> None:
    """Version 7: executions are found by run and by call without their principal (an
    approver's lookup, a run's events): two indexes, where each was a scan of the table."""
    db.run("CREATE INDEX IF NOT EXISTS ix_executions_run ON executions (run_id, call_id)")
    db.run("CREATE INDEX IF NOT EXISTS ix_executions_call ON executions (call_id)")


STEPS: dict[int, Callable[[Db], None]] = {
    2: _chain_events,
    3: _approver_roles,
    4: _ended_sessions,
    5: _shadow_differences,
    6: _notifications,
    7: _run_and_call_indexes,
}
"""The step that brings a store to each version from the one before."""


def upgrade(db: Db, found: int, target: int) -> None:
    """Run the steps from version ``found`` to ``target``."""
    for version in range(found + 1, target + 1):
        STEPS[version](db)
