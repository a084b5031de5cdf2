"""An approved call whose resume was interrupted before its side effect began, taken over
by another replica (gateway/runtime/recovery.py): it runs once, on the approval it was
given, and never waits for a second one.

The failure this pins (tests/integration/test_replicas.py, a flake of ~1 run in 3 under
load): a replica took the decision (or its sweep resumed the call), spent the approval and
marked the call running, and was killed before ``tool.started``. A survivor's recovery
requeued the call like any other that had not started; the worker that dequeued it ran the
policy again *without* the approval (already spent), which asked for approval again: the
call parked for a second approval nobody knew of, and stayed 202 for good.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.events.model import make_event
from gateway.instance import HOST, INSTANCE_ID
from gateway.pipeline.runner import run_call, run_queued
from gateway.pipeline.services import Services
from gateway.runtime.approvals import resume
from gateway.runtime.recovery import recover, unresumed
from gateway.store.records import ApprovalRecord, ReplicaRecord
from gateway.store.store import Store
from gateway.types import Decision, DecisionResult, Status
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    make_services,
    ok,
    request,
    sha_probe,
)

pytestmark = pytest.mark.anyio
DEAD = "far:4242:1"
"""The replica that resumed the call and died: another node, its lease long gone."""


def _approve_first(document: Mapping[str, Any]) -> Decision:
    if document["approval"]["present"]:
        return Decision(DecisionResult.ALLOW, ("approved",))
    return Decision(DecisionResult.REQUIRE_APPROVAL, ("risky",))


async def _resumed_by_a_dead_replica(
    store: Store, services: Services
) -> tuple[str, ApprovalRecord]:
    """A call parked, approved, and resumed by ``DEAD`` (approval spent, call running,
    owned by it) before it began its side effect: what the SIGKILL left."""
    parked = await run_call(services, request())
    assert parked.status is Status.AWAITING_APPROVAL and parked.approval_id
    decided = await store.decide_approval(parked.approval_id, "approved", "bob", None)
    approval: ApprovalRecord = decided.approval  # type: ignore[union-attr]
    resolved = make_event(parked.id, 0, "approval.resolved", {"approval_id": approval.id})
    assert await store.resume(parked.id, approval.id, [resolved], DEAD)
    now = int(time.time() * 1000)
    await store.beat_replica(ReplicaRecord(DEAD, "elsewhere", HOST, 4242, 1, 0, 0), -60)
    await store._write(lambda db: db.run("UPDATE approvals SET decided_ms = ?", (now - 60_000,)))
    return parked.id, approval


async def _one_worker_pass(services: Services, store: Store) -> None:
    """What the workers of a live replica do in one pass: recover, resume the approved
    calls left parked, run what is queued."""
    await recover(services)
    for approval in await unresumed(services):
        await resume(services, approval)
    while (queued := await store.claim_queued(INSTANCE_ID)) is not None:
        await run_queued(services, queued)


async def test_a_resumed_call_taken_over_before_it_began_runs_on_its_approval(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter = FunctionAdapter(ok, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(_approve_first))
    execution_id, approval = await _resumed_by_a_dead_replica(store, services)

    await _one_worker_pass(services, store)

    done = await store.get_execution(execution_id)
    assert done is not None
    asked = [a for a in await store.list_approvals(None) if a.execution_id == execution_id]
    assert [a.id for a in asked] == [approval.id], "it asked for approval a second time"
    assert done.status is Status.COMPLETED, done.status
    assert done.result is not None and done.outcome == "succeeded", done.result
    assert len(adapter.calls) == 1
    assert (await store.get_approval(approval.id)).status == "used"  # type: ignore[union-attr]
    events = await store.events(execution_id)
    note = next(e.data for e in events if e.data.get("by") == "recovery")
    assert note["owner"] == DEAD and note["because"] == "lease_expired"
    assert note["replica"] == INSTANCE_ID
    assert [e.type for e in events].count("tool.completed") == 1


async def test_unresume_changes_nothing_unless_the_call_runs_on_its_spent_approval(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter = FunctionAdapter(ok, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(_approve_first))
    parked = await run_call(services, request())
    assert parked.approval_id is not None
    assert not await store.unresume(parked.id, parked.approval_id, [], DEAD)  # parked, pending
    await store.decide_approval(parked.approval_id, "approved", "bob", None)
    assert not await store.unresume(parked.id, parked.approval_id, [], DEAD)  # not resumed
    assert await store.resume(parked.id, parked.approval_id, [], DEAD)
    # Resumed by DEAD, but another owner has it now (a second recovery's stale view).
    assert not await store.unresume(parked.id, parked.approval_id, [], "elsewhere:1:1")
    started = make_event(parked.id, 0, "tool.started", {})
    assert await store.append(parked.id, [started]) is None
    assert not await store.unresume(parked.id, parked.approval_id, [], DEAD)  # it started
    assert (await store.get_approval(parked.approval_id)).status == "used"  # type: ignore[union-attr]
    # The approval is spent, but it names another execution: the two rows move together.
    await store._write(lambda db: db.run("UPDATE approvals SET execution_id = 'ex_other'"))
    assert not await store.unresume(parked.id, parked.approval_id, [], DEAD)
    running = await store.get_execution(parked.id)
    assert running is not None and running.status is Status.RUNNING
    approval = await store.get_approval(parked.approval_id)
    assert approval is not None and approval.status == "used"
