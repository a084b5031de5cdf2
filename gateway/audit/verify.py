"""``toolgate audit verify``: every chain checked, every checkpoint's signature and link
checked, and every head a checkpoint recorded looked up in the chains.

With ``since_ms``, only the chains with an event since then (each checked whole) and the
checkpoints written since then (linked to the one before them).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway.audit.chains import Fault, check_chain
from gateway.audit.checkpoints import GENESIS, body, event_floor, heads_of
from gateway.audit.keys import Verifier
from gateway.store.audit import ChainRow, CheckpointRecord
from gateway.store.store import Store

PAGE = 5000


@dataclass
class Report:
    faults: list[Fault] = field(default_factory=list)
    chains: int = 0
    events: int = 0
    checkpoints: int = 0
    heads: int = 0

    @property
    def ok(self) -> bool:
        return not self.faults


@dataclass
class _Seen:
    """The last head a checkpoint recorded for each execution: (seq, hash, checkpoint)."""

    heads: dict[str, tuple[int, str, int]] = field(default_factory=dict)


async def chains(store: Store, since_ms: int | None) -> AsyncIterator[list[ChainRow]]:
    """Each execution's events, one execution at a time."""
    if since_ms is not None:
        for execution_id in await store.audit_touched_since(event_floor(since_ms)):
            rows = await store.audit_chain(execution_id)
            if rows:
                yield rows
        return
    after, seq, current = "", -1, list[ChainRow]()
    while True:
        page = await store.audit_chain_page(after, seq, PAGE)
        for row in page:
            if current and row.execution_id != current[0].execution_id:
                yield current
                current = []
            current.append(row)
        if len(page) < PAGE:
            break
        after, seq = page[-1].execution_id, page[-1].seq
    if current:
        yield current


async def verify(store: Store, verifier: Verifier, since_ms: int | None = None) -> Report:
    report = Report()
    seen = await _check_checkpoints(store, verifier, since_ms, report)
    report.heads = len(seen.heads)
    pending = dict(seen.heads)
    async for rows in chains(store, since_ms):
        report.chains += 1
        report.events += len(rows)
        report.faults.extend(check_chain(rows))
        recorded = pending.pop(rows[0].execution_id, None)
        if recorded is not None:
            _check_head(rows[0].execution_id, recorded, rows, report)
    # The chains a checkpoint saw that were not read above: gone, or (with since_ms) not
    # written to since then.
    for execution_id, recorded in sorted(pending.items()):
        rows = await store.audit_chain(execution_id) if since_ms is not None else []
        _check_head(execution_id, recorded, rows, report)
    if since_ms is None:
        faulted = {f.execution_id for f in report.faults}
        for execution_id in await store.audit_without_events():
            if execution_id not in faulted:
                report.faults.append(
                    Fault("deleted", execution_id, None, "the execution has no events left")
                )
    return report


async def _check_checkpoints(
    store: Store, verifier: Verifier, since_ms: int | None, report: Report
) -> _Seen:
    seen = _Seen()
    after = 0
    prev: CheckpointRecord | None = None
    if since_ms is not None:
        first = await store.audit_first_checkpoint_since(since_ms)
        if first is None:
            return seen
        after = first - 1
        if after > 0:
            before = await store.audit_checkpoints(after - 1, 1)
            prev = before[0] if before and before[0].seq == after else None
            if prev is None:
                report.faults.append(
                    Fault("checkpoint", None, None, f"checkpoint #{after} is missing")
                )
    while True:
        page = await store.audit_checkpoints(after, 500)
        for record in page:
            report.checkpoints += 1
            if _check_one(record, prev, after, verifier, report):
                # Only what a checkpoint that verifies says is held against the chains.
                for execution_id, seq, digest in heads_of(record):
                    seen.heads[execution_id] = (seq, digest, record.seq)
            prev, after = record, record.seq
        if len(page) < 500:
            return seen


def _check_one(
    record: CheckpointRecord,
    prev: CheckpointRecord | None,
    after: int,
    verifier: Verifier,
    report: Report,
) -> bool:
    """Check one checkpoint; whether its content and signature verify."""

    def fault(detail: str) -> None:
        report.faults.append(Fault("checkpoint", None, None, f"checkpoint #{record.seq}: {detail}"))

    if record.seq != after + 1:
        missing = f"#{after + 1}" if record.seq == after + 2 else f"#{after + 1}..#{record.seq - 1}"
        report.faults.append(Fault("checkpoint", None, None, f"checkpoint {missing} deleted"))
    expected_prev = GENESIS if record.seq == 1 else (prev.digest if prev else None)
    if expected_prev is not None and record.prev != expected_prev and record.seq == after + 1:
        fault("does not link to the checkpoint before it (inserted, or that one was replaced)")
    heads = heads_of(record)
    data = body(record.seq, record.at_ms, record.prev, heads)
    intact = hashlib.sha256(data).hexdigest() == record.digest and bool(heads)
    if not intact:
        fault("its content does not match its digest (edited)")
    problem = verifier.verify(record.key_id, data, record.signature)
    if problem is not None:
        fault(problem)
    return intact and problem is None


def _check_head(
    execution_id: str, recorded: tuple[int, str, int], rows: list[ChainRow], report: Report
) -> None:
    """The head a checkpoint recorded must still be in its chain, with the same hash."""
    seq, digest, cp = recorded
    found = next((r for r in rows if r.seq == seq), None)
    if found is not None:
        if found.hash != digest:
            detail = f"its hash is not the one checkpoint #{cp} recorded (the chain was rewritten)"
            report.faults.append(Fault("edited", execution_id, seq, detail))
        return
    if not rows:
        detail = f"the whole chain is gone (checkpoint #{cp} recorded it up to seq {seq})"
        report.faults.append(Fault("deleted", execution_id, None, detail))
    elif rows[-1].seq < seq:
        first = rows[-1].seq + 1
        span = f"seq {first}" if first == seq else f"seq {first}..{seq}"
        detail = f"{span} gone from the end of the chain (checkpoint #{cp} recorded seq {seq})"
        report.faults.append(Fault("deleted", execution_id, first, detail))
    else:
        detail = f"seq {seq} is gone (checkpoint #{cp} recorded it)"
        report.faults.append(Fault("deleted", execution_id, seq, detail))
