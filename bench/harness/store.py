"""The store's transactions on their own: an empty write transaction (async and sync), the
reserve + commit of one execution, and the append of one event with its hash chain against
the append as it was before the audit trail (same run, same store), on SQLite or PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

from gateway import jsontext
from gateway.events.chain import GENESIS, event_hash
from gateway.events.model import Event, make_event
from gateway.instance import INSTANCE_ID
from gateway.pipeline.records import new_execution_id
from gateway.store import events as event_log
from gateway.store import rows
from gateway.store.records import ExecutionRecord
from gateway.store.sql import Db, Sql, placeholders
from gateway.store.store import Reserved, Store
from gateway.types import Status

from .timing import stats_us, timed_async, timed_loop

UNCHAINED_APPEND = Sql(
    f"INSERT INTO events ({rows.EVENT_COLUMNS}) "
    "VALUES (?, ?, (SELECT coalesce(max(seq), -1) + 1 FROM events WHERE execution_id = ?), "
    "?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
)
"""The append before the audit trail: numbered by the statement, no link, no hash."""


def append_unchained(db: Db, events: list[Event]) -> None:
    """``events.insert`` as it was before the audit trail (for the comparison only)."""
    execution_id = events[0].execution_id
    db.advisory_lock("ev:" + execution_id)
    ids = [e.id for e in events]
    found = db.all(f"SELECT id FROM events WHERE id IN ({placeholders(len(ids))})", ids)
    known = {r[0] for r in found}
    events = [e for e in events if e.id not in known]
    stored = []
    for e in events:
        data = jsontext.stored(e.data)
        stored.append((e.id, e.execution_id, e.execution_id, e.type, e.version, e.at_ms, data))
    db.many(UNCHAINED_APPEND, stored)


def append_cost(store: Store, n: int) -> dict[str, Any]:
    """One ``tool.output``-sized event appended to a running execution, in a transaction of
    its own: chained (the store's append) and unchained (as before), alternating in blocks so
    that a change in the machine's load hits both; and the hash alone."""
    data = {"stream": "stdout", "text": "x" * 200}
    chained, unchained = f"ex_bench_chained_{id(store)}", f"ex_bench_plain_{id(store)}"

    def chained_once() -> None:
        store._tx(event_log.append, True, chained, [make_event(chained, 0, "tool.output", data)])

    def unchained_once() -> None:
        store._tx(append_unchained, True, [make_event(unchained, 0, "tool.output", data)])

    runs: dict[str, list[Any]] = {"chained": [], "unchained": []}
    block = max(n // 4, 10)
    for _ in range(4):
        runs["chained"].append(timed_loop(chained_once, block, warmup=5))
        runs["unchained"].append(timed_loop(unchained_once, block, warmup=5))
    out: dict[str, Any] = {}
    for name, samples in runs.items():
        merged = type(samples[0])(s for part in samples for s in part)
        merged.cpu_s = sum(part.cpu_s for part in samples)
        out[f"append_event_{name}"] = stats_us(merged)
    text = jsontext.stored(data)
    out["event_hash"] = stats_us(
        timed_loop(lambda: event_hash(GENESIS, chained, 7, "ev_x", "tool.output", 1, 1, text), n)
    )
    out["append_event_chain_cpu_us"] = round(
        out["append_event_chained"]["cpu_us_per_call"]
        - out["append_event_unchained"]["cpu_us_per_call"],
        1,
    )
    return out


async def store_micro(url: str, n: int) -> dict[str, Any]:
    store = Store(url)
    await store.open()
    try:
        out: dict[str, Any] = {}
        out["empty_write_tx"] = stats_us(
            await timed_async(lambda: store._write(lambda conn: None), n)
        )
        out["empty_write_tx_sync"] = stats_us(
            timed_loop(lambda: store._tx(lambda c: None, True), n)
        )
        counter = iter(range(10**9))

        async def reserve_commit() -> None:
            i = next(counter)
            now = int(time.time() * 1000)
            ex = new_execution_id()
            record = ExecutionRecord(
                id=ex,
                principal="alice",
                agent_id="bench",
                run_id="micro",
                turn_id="",
                call_id=f"c{i}",
                payload_sha256="0" * 64,
                workspace_id="demo",
                tool_name="fs.write_file",
                tool_version="1.2.0",
                risk="medium",
                status=Status.RUNNING,
                outcome=None,
                arguments_sha256="1" * 64,
                idempotency_scope=None,
                approval_id=None,
                cancellation_token=None,
                request_json=f'{{"call_id":"c{i}"}}',
                result_json=None,
                fencing_json=None,
                owner=INSTANCE_ID,
                created_ms=now,
                updated_ms=now,
            )
            events = [
                make_event(ex, 0, "tool.requested", {"call_id": f"c{i}"}),
                make_event(ex, 1, "tool.resolved", {"version": "1.2.0"}),
                make_event(ex, 2, "policy.decided", {"result": "allow", "reasons": []}),
            ]
            got = await store.reserve(record, events, None)
            assert isinstance(got, Reserved), got
            done = await store.commit(
                ex,
                outcome="succeeded",
                result_json='{"outcome":"succeeded"}',
                events=[make_event(ex, 3, "tool.completed", {"outcome": "succeeded"})],
                fencing_json=None,
            )
            assert done

        out["reserve_commit"] = stats_us(await timed_async(reserve_commit, n))
        out.update(append_cost(store, n))
        return out
    finally:
        await store.aclose()
