"""Shadow differences: one row per decision a shadow (candidate) policy made otherwise than
the enforcing one, written off the call's path by ``gateway.policy.shadow`` and read by
``toolgate policy shadow report`` (every replica writes to the one store, so the report
counts all of them)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.store.records import ShadowDifference
from gateway.store.sql import Db, Sql

COLUMNS = (
    "id, at_ms, kind, tool_name, execution_id, call_id, enforced_revision, "
    "candidate_revision, enforced_json, candidate_json"
)
INSERT = Sql(f"INSERT INTO shadow_differences ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
SINCE = Sql(
    f"SELECT {COLUMNS} FROM shadow_differences WHERE at_ms >= ? ORDER BY at_ms DESC, id LIMIT ?"
)
COUNTS = Sql(
    "SELECT kind, tool_name, count(*) FROM shadow_differences WHERE at_ms >= ? "
    "GROUP BY kind, tool_name ORDER BY kind, tool_name"
)


def record(db: Db, differences: Sequence[ShadowDifference]) -> None:
    db.many(INSERT, [tuple(d) for d in differences])


def counts_since(db: Db, since_ms: int) -> list[tuple[str, str, int]]:
    """(kind, tool, how many) of the differences at or after ``since_ms``."""
    return [(str(k), str(t), int(n)) for k, t, n in db.all(COUNTS, (since_ms,))]


def latest_since(db: Db, since_ms: int, limit: int) -> list[ShadowDifference]:
    """The newest ``limit`` differences at or after ``since_ms``."""
    return [ShadowDifference(*row) for row in db.all(SINCE, (since_ms, limit))]
