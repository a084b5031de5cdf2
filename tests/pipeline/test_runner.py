"""The pipeline's runner: the stage order, a call end to end, and what recovery and a person
do with what it leaves."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.adapters.base import AdapterCall, AdapterOutcome
from gateway.declarations.catalogue import Catalogue
from gateway.observability.telemetry import Telemetry
from gateway.pipeline.runner import STAGES, run_call
from gateway.pipeline.services import Services
from gateway.store.store import Store
from gateway.types import Status
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    ok,
    request,
    sha_probe,
)

pytestmark = pytest.mark.anyio


def test_stage_order_is_the_design() -> None:
    assert [s.name for s in STAGES] == [
        "resolve",
        "normalise",
        "validate",
        "policy",
        "reserve",
        "lock",
        "execute",
        "result",
        "verify",
        "commit",
    ]


async def test_success_runs_adapter_once_with_normalised_arguments(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter = FunctionAdapter(ok, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    record = await run_call(services, request(arguments={"path": "./a.txt", "content": "hi"}))
    assert record.status is Status.COMPLETED and record.outcome == "succeeded"
    assert len(adapter.calls) == 1
    call = adapter.calls[0]
    assert dict(call.arguments) == {"path": "a.txt", "content": "hi", "create_dirs": True}
    assert list(call.fencing_tokens.values()) == [1]


async def test_unknown_is_resolved_by_a_person(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    from gateway.errors import Conflict, MalformedRequest
    from gateway.runtime import cancellation

    async def crash(call: AdapterCall) -> AdapterOutcome:
        raise RuntimeError("boom")

    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(crash), FunctionPolicy(allow_all)
    )
    req = request("fs.apply_patch", arguments={"path": "a.txt", "patch": "x"})
    record = await run_call(services, req)
    assert record.outcome == "unknown"
    with pytest.raises(MalformedRequest):
        await cancellation.resolve_unknown(services, record, "bob", "succeeded", " ")
    resolved = await cancellation.resolve_unknown(
        services, record, "bob", "succeeded", "checked the file by hand"
    )
    assert resolved.outcome == "succeeded"
    assert resolved.result is not None and resolved.result["resolution"]["by"] == "bob"
    assert resolved.result["error"] is None
    assert (await store.events(record.id))[-1].type == "outcome.resolved"
    with pytest.raises(Conflict):
        await cancellation.resolve_unknown(services, resolved, "bob", "failed", "changed my mind")


async def test_recovery_settles_what_a_dead_owner_left(services: Services, store: Store) -> None:
    from gateway.adapters.file.adapter import FileAdapter
    from gateway.events.model import make_event
    from gateway.runtime.recovery import recover

    services = replace(services, adapters={"file": FileAdapter()})
    record = await run_call(services, request(call_id="seed"))  # a real execution to copy
    dead = "nohost:1:1"  # another host, heartbeat stale: its owner is gone
    stale = record.created_ms - 10 * 60_000
    started = record._replace(
        id="ex_dead1",
        call_id="d1",
        status=Status.RUNNING,
        outcome=None,
        result_json=None,
        owner=dead,
        updated_ms=stale,
        payload_sha256="p1",
    )
    unstarted = started._replace(id="ex_dead2", call_id="d2", payload_sha256="p2")
    for r, types in (
        (started, ["tool.requested", "tool.started"]),
        (unstarted, ["tool.requested"]),
    ):
        await store.reserve(r, [make_event(r.id, i, t, {}) for i, t in enumerate(types)], None)
        await store.set_status(r.id, [Status.RUNNING], Status.RUNNING)
    await store._write(
        lambda db: db.run(  # age the heartbeats
            f"UPDATE executions SET updated_ms = {stale} WHERE id IN ('ex_dead1', 'ex_dead2')"
        )
    )
    from gateway.observability.metrics import Metrics
    from gateway.observability.telemetry import Telemetry

    metrics = Metrics()
    services = replace(services, telemetry=Telemetry(metrics=metrics))
    settled = {r.id: r for r in await recover(services)}
    # The file holds "hi" (written by the seed call), which is what ex_dead1 meant to write.
    assert settled["ex_dead1"].outcome == "succeeded"
    assert settled["ex_dead2"].status is Status.QUEUED  # nothing was attempted: run it again
    assert metrics.recovery.values == {("settled_succeeded",): 1, ("requeued",): 1}
    # the settled one ended outside the pipeline, and is counted as an execution that ended
    assert metrics.executions.values == {("fs.write_file", "succeeded", ""): 1}


async def test_a_failure_after_the_side_effect_is_settled_by_recovery(
    tmp_path: Path, store: Store, catalogue: Catalogue, telemetry: Telemetry
) -> None:
    from gateway.errors import StoreError
    from gateway.faults import Faults
    from gateway.runtime.recovery import recover

    adapter = FunctionAdapter(ok, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(
        tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all), telemetry
    )
    # The store fails after the side effect: nothing can be recorded, recovery settles it.
    # (Any other exception there is settled by the call itself: tests/pipeline/test_catchall.)
    faulty = replace(services, faults=Faults.parse("after_side_effect:store_unavailable"))
    with pytest.raises(StoreError):
        await run_call(faulty, request())
    [left] = await store.unfinished([Status.RUNNING])
    # the call gave its locks back as it left the runner, whatever telemetry observed it
    assert await store.renew_locks(left.id, 30) == 0
    settled = await recover(services)
    assert [r.id for r in settled] == [left.id]
    assert settled[0].outcome == "succeeded"  # the reconcile probe found the content
    assert settled[0].result is not None
    assert "recovered" in settled[0].result["side_effect"]["summary"]
