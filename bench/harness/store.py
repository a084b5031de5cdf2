"""The store's transactions on their own: an empty write transaction (async and sync) and
the reserve + commit of one execution, on SQLite or PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

from gateway.events.model import make_event
from gateway.instance import INSTANCE_ID
from gateway.pipeline.records import new_execution_id
from gateway.store.records import ExecutionRecord
from gateway.store.store import Reserved, Store
from gateway.types import Status

from .timing import stats_us, timed_async, timed_loop


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
        return out
    finally:
        await store.aclose()
