"""Stage reserve (gateway/pipeline/reserve.py): the execution made durable, replays,
parking, resuming."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.errors import StoreError
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


async def test_a_crash_after_the_reservation_never_leaves_a_wait_for_a_missing_approval(
    tmp_path: Path, store: Store, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reservation of a call that needs approval writes its approval in the same
    transaction: if the process dies right after it (here: every later write fails), the
    store holds an execution awaiting an approval that exists, never one without it (which
    no replica would ever settle, and whose readers saw ``approval: null``)."""
    policy = FunctionPolicy(lambda d: Decision(DecisionResult.REQUIRE_APPROVAL, ("a person",)))
    services = make_services(tmp_path, store, catalogue, FunctionAdapter(ok), policy)
    reserve, write = store.reserve, store._write
    dead = False

    async def reserve_then_die(*args: object, **kwargs: object) -> object:
        nonlocal dead
        outcome = await reserve(*args, **kwargs)  # type: ignore[arg-type]
        dead = True
        return outcome

    async def write_unless_dead(*args: object, **kwargs: object) -> object:
        if dead:
            raise StoreError("the process died")
        return await write(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "reserve", reserve_then_die)
    monkeypatch.setattr(store, "_write", write_unless_dead)
    with contextlib.suppress(StoreError):  # a later write failed: what the store holds counts
        await run_call(services, request())
    [parked] = await store.unfinished([Status.AWAITING_APPROVAL])
    assert parked.approval_id is not None
    approval = await store.get_approval(parked.approval_id)
    assert approval is not None and approval.status == "pending"
    assert approval.execution_id == parked.id
