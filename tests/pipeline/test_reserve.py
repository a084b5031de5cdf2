"""Stage reserve (gateway/pipeline/reserve.py): the execution made durable, replays,
parking, resuming."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.pipeline.runner import run_call
from gateway.pipeline.services import Services
from gateway.store.store import Store
from gateway.types import Decision, DecisionResult, Status
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    make_services,
    ok,
    prepared,
    request,
)

pytestmark = pytest.mark.anyio


async def test_a_dequeued_call_that_now_needs_approval_is_parked(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    from gateway.pipeline.runner import run_queued

    verdicts = [DecisionResult.ALLOW, DecisionResult.REQUIRE_APPROVAL]
    adapter = FunctionAdapter(ok)
    policy = FunctionPolicy(lambda d: Decision(verdicts.pop(0), ("rules changed",)))
    services = make_services(tmp_path, store, catalogue, adapter, policy)
    queued = await run_call(services, request(), respond_async=True)
    assert queued.status is Status.QUEUED
    claimed = await store.claim_queued("me")
    assert claimed is not None
    parked = await run_queued(services, claimed)
    assert parked.status is Status.AWAITING_APPROVAL and parked.approval_id
    assert adapter.calls == []


async def test_a_read_nobody_waits_on_needs_no_reservation(
    services: Services, store: Store
) -> None:
    from gateway.pipeline import reserve
    from gateway.pipeline.records import Authorized, Reserved

    state = await prepared(services, request("fs.read_file", arguments={"path": "a.txt"}))
    reserved = await reserve.run(services, Authorized(state.call, None, None, state.trail))
    assert isinstance(reserved, Reserved) and reserved.record is None  # ephemeral
    assert reserved.trail == state.trail  # nothing written: its events wait for commit
    assert await store.get_execution(state.call.execution_id) is None
    write = await prepared(services, request(call_id="c2"))
    durable = await reserve.run(services, Authorized(write.call, None, None, write.trail))
    assert isinstance(durable, Reserved) and durable.record is not None
    assert durable.record.status is Status.RUNNING and durable.trail.events == ()
