"""The audit trail's reads and its one write: chains of events as stored (with their links),
the heads of the chains that moved, and the signed checkpoints (``gateway/audit/``).

An event id starts with its time (``gateway/ids.py``), so "events since" is a range of the
events' primary key: no index of its own, nothing more written per event.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.store.sql import Db, Sql

CHAIN_COLUMNS = "id, execution_id, seq, type, version, at_ms, data_json, prev, hash"


@dataclass(frozen=True, slots=True)
class ChainRow:
    """An events row as stored, with its link (``prev``) and ``hash`` (None: never set)."""

    id: str
    execution_id: str
    seq: int
    type: str
    version: int
    at_ms: int
    data_json: str
    prev: str | None
    hash: str | None


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    seq: int
    at_ms: int
    prev: str
    heads_json: str
    digest: str
    key_id: str
    signature: str
    writer: str = ""


@dataclass(frozen=True, slots=True)
class CheckpointLink:
    """What the next checkpoint follows: the last one's number, time and digest, without its
    heads (about 100 bytes a head: a megabyte and more in a busy minute)."""

    seq: int
    at_ms: int
    digest: str


CHECKPOINT_COLUMNS = "seq, at_ms, prev, heads_json, digest, key_id, signature, writer"

CHAIN_PAGE = Sql(
    f"SELECT {CHAIN_COLUMNS} FROM events "
    "WHERE (execution_id, seq) > (?, ?) ORDER BY execution_id, seq LIMIT ?"
)
CHAIN_OF = Sql(f"SELECT {CHAIN_COLUMNS} FROM events WHERE execution_id = ? ORDER BY seq")
# No DISTINCT in these: SQLite would then scan the (execution_id, seq) index whole instead of
# the primary key's range.
TOUCHED_SINCE = Sql("SELECT execution_id FROM events WHERE id >= ?")
# One range of the primary key, reduced here: a join back to each chain's max(seq) makes
# PostgreSQL scan the whole table.
HEADS_SINCE = Sql(
    "SELECT e.execution_id, e.seq, e.hash FROM events e JOIN ("
    " SELECT execution_id, max(seq) AS seq FROM events WHERE id >= ? GROUP BY execution_id"
    ") h ON e.execution_id = h.execution_id AND e.seq = h.seq"
)
"""The last event since a floor of every execution touched since: one row per execution (the
database groups them; fetching every event of the window held ~100,000 rows in memory at
once under a busy minute, an RSS step at each checkpoint)."""
LAST_CHECKPOINT = Sql(
    f"SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints ORDER BY seq DESC LIMIT 1"
)
LAST_LINK = Sql("SELECT seq, at_ms, digest FROM audit_checkpoints ORDER BY seq DESC LIMIT 1")
CHECKPOINTS_AFTER = Sql(
    f"SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints WHERE seq > ? ORDER BY seq LIMIT ?"
)
CHECKPOINTS_SINCE = Sql("SELECT min(seq) FROM audit_checkpoints WHERE at_ms >= ?")
INSERT_CHECKPOINT = Sql(
    f"INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
WITHOUT_EVENTS = Sql(
    "SELECT x.id FROM executions x WHERE NOT EXISTS "
    "(SELECT 1 FROM events e WHERE e.execution_id = x.id) ORDER BY x.id"
)
SCHEMA_VERSION = Sql("SELECT version FROM schema_version WHERE id = 1")


def chain_page(db: Db, after_execution: str, after_seq: int, limit: int) -> list[ChainRow]:
    """Up to ``limit`` events after (``after_execution``, ``after_seq``), in chain order."""
    params = (after_execution, after_seq, int(limit))
    return [ChainRow(*row) for row in db.all(CHAIN_PAGE, params)]


def chain_of(db: Db, execution_id: str) -> list[ChainRow]:
    return [ChainRow(*row) for row in db.all(CHAIN_OF, (execution_id,))]


def touched_since(db: Db, floor_id: str) -> list[str]:
    """The executions with an event whose id is ``floor_id`` or later."""
    return sorted({row[0] for row in db.all(TOUCHED_SINCE, (floor_id,))})


def heads_since(db: Db, floor_id: str) -> list[tuple[str, int, str | None]]:
    """(execution_id, seq, hash) of the last event since ``floor_id`` of every execution
    touched since: its head (the last event appended is the newest, up to the clocks of
    the replicas: a checkpoint then holds an event just before the head, still true)."""
    heads: dict[str, tuple[int, str | None]] = {}
    for execution_id, seq, digest in db.all(HEADS_SINCE, (floor_id,)):
        known = heads.get(execution_id)
        if known is None or seq > known[0]:
            heads[execution_id] = (int(seq), digest)
    return [(x, seq, digest) for x, (seq, digest) in sorted(heads.items())]


def last_checkpoint(db: Db) -> CheckpointRecord | None:
    row = db.one(LAST_CHECKPOINT)
    return CheckpointRecord(*row) if row else None


def last_link(db: Db) -> CheckpointLink | None:
    row = db.one(LAST_LINK)
    return CheckpointLink(int(row[0]), int(row[1]), str(row[2])) if row else None


def checkpoints_after(db: Db, after_seq: int, limit: int) -> list[CheckpointRecord]:
    return [CheckpointRecord(*row) for row in db.all(CHECKPOINTS_AFTER, (after_seq, int(limit)))]


def first_checkpoint_since(db: Db, since_ms: int) -> int | None:
    row = db.one(CHECKPOINTS_SINCE, (since_ms,))
    return None if row is None or row[0] is None else int(row[0])


def add_checkpoint(db: Db, record: CheckpointRecord) -> bool:
    """Insert ``record`` if it still follows the last checkpoint (another replica may have
    written one since it was made): False, and nothing written, if not."""
    db.advisory_lock("toolgate:audit-checkpoint")
    last = last_link(db)
    if last is None:
        follows = record.seq == 1
    else:
        follows = last.seq == record.seq - 1 and last.digest == record.prev
    if not follows:
        return False
    db.run(
        INSERT_CHECKPOINT,
        (
            record.seq,
            record.at_ms,
            record.prev,
            record.heads_json,
            record.digest,
            record.key_id,
            record.signature,
            record.writer,
        ),
    )
    return True


def without_events(db: Db) -> list[str]:
    """Executions that have no event at all (every execution is recorded with its first)."""
    return [row[0] for row in db.all(WITHOUT_EVENTS)]


def schema_version(db: Db) -> int | None:
    row = db.one(SCHEMA_VERSION)
    return None if row is None else int(row[0])
