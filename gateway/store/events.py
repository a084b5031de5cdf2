"""The event log: appending events (numbered and chained by the store) and reading them back.

Every event is linked to the one before it in its execution by hash (``prev``, ``hash``:
``gateway/events/chain.py``); the store numbers and hashes the rows it appends, under the
execution's lock, so writers of several replicas extend one chain in one order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache

from gateway.events.chain import GENESIS
from gateway.events.model import Event
from gateway.store import rows
from gateway.store.sql import Db, Sql, placeholders

ROWS_PER_INSERT = 64
"""Events one INSERT writes at most (nine parameters each: within every backend's bound)."""
EVENT_ROW = f"({placeholders(9)})"


@cache
def _insert_events(count: int) -> Sql:
    """One statement for ``count`` events (a round trip on PostgreSQL, where a statement per
    event cost a bind and an execution each on both sides)."""
    return Sql(
        f"INSERT INTO events ({rows.CHAINED_EVENT_COLUMNS}) "
        f"VALUES {', '.join([EVENT_ROW] * count)} ON CONFLICT (id) DO NOTHING"
    )


def insert_rows(db: Db, chained: Sequence[Sequence[object]]) -> None:
    """Write chained event rows (``rows.chained_rows``), ROWS_PER_INSERT to a statement."""
    for start in range(0, len(chained), ROWS_PER_INSERT):
        chunk = chained[start : start + ROWS_PER_INSERT]
        db.run(_insert_events(len(chunk)), [value for row in chunk for value in row])


CHAIN_HEAD = Sql("SELECT seq, hash FROM events WHERE execution_id = ? ORDER BY seq DESC LIMIT 1")
EVENTS_AFTER = Sql(
    f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE execution_id = ? AND seq > ? ORDER BY seq"
)


def insert(db: Db, events: Iterable[Event], *, fresh: bool = False, unseen: bool = False) -> None:
    """Append events; the store numbers and chains them (writers outside the running flow,
    such as a cancel, may append to the same execution). Applying an event twice changes
    nothing: its id is its identity. ``fresh``: the execution was inserted by this very
    transaction, so it has no events yet. ``unseen``: the events were made inside this
    transaction, so none can have been applied before."""
    events = list(events)
    if not events:
        return
    execution_id = events[0].execution_id
    for e in events:
        if e.execution_id != execution_id:
            raise ValueError("one append is for one execution")
    if fresh:
        insert_rows(db, rows.chained_rows(events, 0, GENESIS))
        return
    db.advisory_lock("ev:" + execution_id)
    # Under the execution's lock (one writer at a time on SQLite) the head cannot move.
    if unseen:
        head = db.one(CHAIN_HEAD, (execution_id,))
    else:
        # One statement: the chain's head, and those of the events applied before.
        ids = [e.id for e in events]
        found = db.all(_head_and_known(len(ids)), (execution_id, *ids))
        wanted = set(ids)
        known = {row[2] for row in found if row[2] in wanted}
        events = [e for e in events if e.id not in known]  # applied before
        if not events:
            return
        head = max(found, default=None, key=lambda row: row[0])
    seq, prev = (0, GENESIS) if head is None else (head[0] + 1, head[1] or GENESIS)
    insert_rows(db, rows.chained_rows(events, seq, prev))


@cache
def _head_and_known(count: int) -> Sql:
    # Two index lookups in one statement (the head: the last entry of the chain's index;
    # the known: primary keys), never a walk over the chain's rows (an execution that
    # streams output has thousands).
    return Sql(
        "SELECT seq, hash, id FROM (SELECT seq, hash, id FROM events WHERE execution_id = ? "
        "ORDER BY seq DESC LIMIT 1) head UNION ALL "
        f"SELECT seq, hash, id FROM events WHERE id IN ({placeholders(count)})"
    )


def append(db: Db, execution_id: str, events: Sequence[Event]) -> None:
    insert(db, events)


EVENTS_PAGE = Sql(
    f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE execution_id = ? AND seq > ? "
    "ORDER BY seq LIMIT ?"
)


def page(db: Db, execution_id: str, after_seq: int, limit: int) -> list[Event]:
    """At most ``limit`` events after ``after_seq``, in order (a live stream's one poll)."""
    return [rows.event(r) for r in db.all(EVENTS_PAGE, (execution_id, after_seq, int(limit)))]


def bounded_page(
    db: Db, positions: Sequence[tuple[str, int]], limit: int, max_bytes: int
) -> tuple[list[Event], bool]:
    """The events after each ``(execution_id, seq)`` of ``positions`` (a run's executions,
    or one execution's), execution after execution in that order: at most ``limit`` events
    and ``max_bytes`` of their data as stored (JSON with non-ASCII escaped: never less than
    the UTF-8 an answer writes of it), the first event whatever its size; and whether more
    remain. One transaction, and no execution read further than the page has room for and
    one event more (to learn whether any remain)."""
    page: list[Event] = []
    size = 0
    for execution_id, after_seq in positions:
        for row in db.all(EVENTS_PAGE, (execution_id, after_seq, limit - len(page) + 1)):
            data_bytes = len(row[6])
            if len(page) == limit or (page and size + data_bytes > max_bytes):
                return page, True
            page.append(rows.event(row))
            size += data_bytes
    return page, False


def after(db: Db, execution_id: str, after_seq: int) -> list[Event]:
    return [rows.event(r) for r in db.all(EVENTS_AFTER, (execution_id, after_seq))]


BY_TYPE_CHUNK = 500
"""Executions per statement of ``of_types`` (within every backend's bound on parameters)."""


@cache
def _of_types(executions: int, types: int) -> Sql:
    return Sql(
        f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE execution_id IN "
        f"({placeholders(executions)}) AND type IN ({placeholders(types)}) "
        "ORDER BY execution_id, seq"
    )


def of_types(db: Db, execution_ids: Sequence[str], types: Sequence[str]) -> dict[str, list[Event]]:
    """The events of these types of each execution, in order: a few statements for many
    executions, without their other events (``tool.output`` can number thousands)."""
    found: dict[str, list[Event]] = {id: [] for id in execution_ids}
    ids = list(found)
    for start in range(0, len(ids), BY_TYPE_CHUNK):
        chunk = ids[start : start + BY_TYPE_CHUNK]
        for row in db.all(_of_types(len(chunk), len(types)), (*chunk, *types)):
            event = rows.event(row)
            found[event.execution_id].append(event)
    return found
