"""The event log: appending events (numbered by the store) and reading them back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gateway.events.model import Event
from gateway.store import rows
from gateway.store.sql import Db, Sql, placeholders

INSERT_EVENT = Sql(
    f"INSERT INTO events ({rows.EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING"
)
# Numbered by the store: the next seq of the execution, counted in the same statement.
APPEND_EVENT = Sql(
    f"INSERT INTO events ({rows.EVENT_COLUMNS}) "
    "VALUES (?, ?, (SELECT coalesce(max(seq), -1) + 1 FROM events WHERE execution_id = ?), "
    "?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
)
EVENTS_AFTER = Sql(
    f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE execution_id = ? AND seq > ? ORDER BY seq"
)


def insert(db: Db, events: Iterable[Event], *, fresh: bool = False, unseen: bool = False) -> None:
    """Append events; the store numbers them (writers outside the running flow, such as a
    cancel, may append to the same execution). Applying an event twice changes nothing: its
    id is its identity. ``fresh``: the execution was inserted by this very transaction, so it
    has no events yet. ``unseen``: the events were made inside this transaction, so none can
    have been applied before."""
    events = list(events)
    if not events:
        return
    execution_id = events[0].execution_id
    if any(e.execution_id != execution_id for e in events):
        raise ValueError("one append is for one execution")
    if fresh:
        db.many(INSERT_EVENT, [rows.event_row(e, i) for i, e in enumerate(events)])
        return
    db.advisory_lock("ev:" + execution_id)
    if not unseen:
        ids = [e.id for e in events]
        known = {
            row[0]
            for row in db.all(f"SELECT id FROM events WHERE id IN ({placeholders(len(ids))})", ids)
        }
        events = [e for e in events if e.id not in known]  # applied before
        if not events:
            return
    # APPEND_EVENT numbers each row after the last one: (..., execution_id, seq query).
    db.many(APPEND_EVENT, [rows.event_row(e, e.execution_id) for e in events])


def append(db: Db, execution_id: str, events: Sequence[Event]) -> None:
    insert(db, events)


EVENTS_PAGE = Sql(
    f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE execution_id = ? AND seq > ? "
    "ORDER BY seq LIMIT ?"
)


def page(db: Db, execution_id: str, after_seq: int, limit: int) -> list[Event]:
    """At most ``limit`` events after ``after_seq``, in order (a live stream's one poll)."""
    return [rows.event(r) for r in db.all(EVENTS_PAGE, (execution_id, after_seq, int(limit)))]


def after(db: Db, execution_id: str, after_seq: int) -> list[Event]:
    return [rows.event(r) for r in db.all(EVENTS_AFTER, (execution_id, after_seq))]
