"""``toolgate audit export``: the trail as JSON lines, one record a line, for a SIEM.

An event line: ``{"record": "event", "id", "execution_id", "seq", "type", "version",
"at_ms", "at", "data", "prev", "hash"}`` (``at``: ISO 8601 UTC; ``data`` the stored text,
spliced in as is, so ``json.dumps(data, separators=(",", ":"))`` in Python gives back the
text the hash covers). With checkpoints, a checkpoint line: ``{"record": "checkpoint",
"seq", "at_ms", "at", "prev", "heads", "digest", "key_id", "signature"}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from gateway.audit.checkpoints import event_floor, heads_of
from gateway.audit.verify import chains
from gateway.store.audit import ChainRow, CheckpointRecord
from gateway.store.store import Store


def iso(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="milliseconds")


def event_line(row: ChainRow) -> str:
    head = json.dumps(
        {
            "record": "event",
            "id": row.id,
            "execution_id": row.execution_id,
            "seq": row.seq,
            "type": row.type,
            "version": row.version,
            "at_ms": row.at_ms,
            "at": iso(row.at_ms),
            "prev": row.prev,
            "hash": row.hash,
        },
        separators=(",", ":"),
    )
    return f'{head[:-1]},"data":{row.data_json}}}'


def checkpoint_line(record: CheckpointRecord) -> str:
    return json.dumps(
        {
            "record": "checkpoint",
            "seq": record.seq,
            "at_ms": record.at_ms,
            "at": iso(record.at_ms),
            "prev": record.prev,
            "heads": [list(h) for h in heads_of(record)],
            "digest": record.digest,
            "key_id": record.key_id,
            "signature": record.signature,
        },
        separators=(",", ":"),
    )


async def export(
    store: Store, write: Callable[[str], None], since_ms: int | None, checkpoints: bool
) -> tuple[int, int]:
    """Write every event (since ``since_ms``) and, if asked, every checkpoint; the counts."""
    floor = event_floor(since_ms) if since_ms is not None else ""
    events = 0
    async for rows in chains(store, since_ms):
        for row in rows:
            if row.id >= floor:
                write(event_line(row) + "\n")
                events += 1
    written = 0
    if checkpoints:
        after = 0
        while True:
            page = await store.audit_checkpoints(after, 500)
            for record in page:
                if since_ms is None or record.at_ms >= since_ms:
                    write(checkpoint_line(record) + "\n")
                    written += 1
                after = record.seq
            if len(page) < 500:
                break
    return events, written
