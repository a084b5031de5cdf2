"""Recovery racing the flows it takes calls from (gateway/runtime/recovery.py,
``store.take_over``; the ``owner`` fence of ``tool.started`` in pipeline/execute.py): a call
that may have started is never run again, and a cancel that came before the side effect
began is kept.

The failure these pin (tests/integration/test_replicas.py, once in ~90 runs under load): an
async process call was taken over as "not started" and queued again, and its side effect
happened twice. Recovery read the call's log, then moved it to ``queued`` with a
compare-and-set on its status alone: what it had read could be stale by then. Two ways
that doubles a side effect, both made deterministic here with a store that pauses one
party at the right moment:

- two survivors take the same call over from one read of it: the first requeues it, a
  worker claims and starts it, and the second, from its stale read, queues it again;
- an owner taken for gone (its lease ran out under a long pause; or, in one process, a
  flow the pass did not see) goes on after recovery requeued its call, and starts it beside
  the worker that claimed it since.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.adapters.base import AdapterCall, AdapterOutcome, SideEffectReport
from gateway.approvals import tokens
from gateway.declarations.catalogue import Catalogue
from gateway.events.model import make_event
from gateway.instance import HOST, INSTANCE_ID
from gateway.pipeline.runner import run_call, run_queued
from gateway.pipeline.services import Services
from gateway.runtime.recovery import recover
from gateway.store.records import ApprovalRecord, ExecutionRecord, ReplicaRecord
from gateway.store.store import Store
from gateway.types import Outcome, Status
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    request,
    sha_probe,
)
from tests.runtime.test_approved_takeover import _approve_first

pytestmark = pytest.mark.anyio
DEAD = "far:4242:1"
"""The replica that claimed the call and was taken for gone: another node, its lease out."""
WORKER = "near:77:1"
"""Another live replica, whose worker claims the requeued call."""


class Blocking:
    """The adapter: its first call (the side effect) holds until released; every call is
    counted."""

    def __init__(self) -> None:
        self.calls = 0
        self.running = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, call: AdapterCall) -> AdapterOutcome:
        self.calls += 1
        if self.calls == 1:
            self.running.set()
            await self.release.wait()
        return AdapterOutcome(Outcome.SUCCEEDED, {"ok": True}, SideEffectReport(True, True, "ok"))


def _services(tmp_path: Path, store: Store, catalogue: Catalogue, effect: Blocking) -> Services:
    """A replica's runtime on the shared store (its own set of running executions)."""
    adapter = FunctionAdapter(effect, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    return make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))


async def _queued(services: Services) -> ExecutionRecord:
    queued = await run_call(services, request(), respond_async=True)
    assert queued.status is Status.QUEUED
    return queued


async def _dead_replica(store: Store) -> None:
    await store.beat_replica(ReplicaRecord(DEAD, "elsewhere", HOST, 4242, 1, 0, 0), -60)


async def _drain(services: Services, store: Store) -> None:
    """A worker's pass over the queue."""
    while (queued := await store.claim_queued(WORKER)) is not None:
        await run_queued(services, queued)


def _pause_once(
    store: Store, name: str, meanwhile: Callable[[], Awaitable[None]]
) -> Callable[[], None]:
    """Make ``store.<name>`` run ``meanwhile`` right after its first call's own work (the
    caller then goes on with what it had read); returns the undo."""
    real = getattr(store, name)
    done = False

    async def paused(*args: Any, **kwargs: Any) -> Any:
        nonlocal done
        value = await real(*args, **kwargs)
        if not done:
            done = True
            await meanwhile()
        return value

    setattr(store, name, paused)
    return lambda: delattr(store, name)


async def test_a_second_takeover_from_a_stale_read_leaves_a_started_call_alone(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    effect = Blocking()
    first, second, worker = (_services(tmp_path, store, catalogue, effect) for _ in range(3))
    queued = await _queued(worker)
    assert await store.claim_queued(DEAD) is not None
    await _dead_replica(store)

    async with anyio.create_task_group() as tg:

        async def first_takes_over_and_a_worker_starts_it() -> None:
            assert [r.status for r in await recover(first)] == [Status.QUEUED]
            claimed = await store.claim_queued(INSTANCE_ID)
            assert claimed is not None
            tg.start_soon(run_queued, worker, claimed)
            await effect.running.wait()  # tool.started is durable: the side effect runs

        undo = _pause_once(store, "events_of_types", first_takes_over_and_a_worker_starts_it)
        await recover(second)  # read the call as DEAD's and not started, before the above
        undo()
        await _drain(second, store)  # what a queue holding it again would run
        effect.release.set()

    assert effect.calls == 1, "the side effect ran twice"
    done = await store.get_execution(queued.id)
    assert done is not None and done.outcome == "succeeded", done
    events = [e.type for e in await store.events(queued.id)]
    assert events.count("tool.started") == 1 and events.count("tool.completed") == 1, events


async def test_an_owner_taken_for_gone_starts_nothing_recovery_requeued(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    effect = Blocking()
    owner, survivor, worker = (_services(tmp_path, store, catalogue, effect) for _ in range(3))
    queued = await _queued(owner)
    claimed = await store.claim_queued(INSTANCE_ID)
    assert claimed is not None

    async def taken_over_and_started_elsewhere() -> None:
        # The survivor does not see this process's flow: to it, the call was left behind.
        assert [r.status for r in await recover(survivor)] == [Status.QUEUED]
        again = await store.claim_queued(WORKER)
        assert again is not None and again.owner == WORKER
        tg.start_soon(run_queued, worker, again)
        await effect.running.wait()

    async with anyio.create_task_group() as tg:
        undo = _pause_once(store, "append", taken_over_and_started_elsewhere)
        # The owner's flow, paused once it has marked the call dequeued (before its locks and
        # tool.started), then going on as a replica would after a long pause.
        after = await run_queued(owner, claimed)
        undo()
        effect.release.set()

    assert effect.calls == 1, "the side effect ran twice"
    assert after.owner == WORKER, after
    done = await store.get_execution(queued.id)
    assert done is not None and done.outcome == "succeeded", done
    events = [e.type for e in await store.events(queued.id)]
    assert events.count("tool.started") == 1 and events.count("tool.completed") == 1, events


async def test_a_cancel_before_the_side_effect_began_is_kept_by_recovery(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    effect = Blocking()
    effect.release.set()
    services = _services(tmp_path, store, catalogue, effect)
    queued = await _queued(services)
    assert await store.claim_queued(DEAD) is not None
    await _dead_replica(store)
    # Cancelled through another replica while DEAD ran it, before tool.started.
    assert await store.set_status(queued.id, [Status.RUNNING], Status.CANCELLING)

    [settled] = await recover(services)
    await _drain(services, store)

    assert effect.calls == 0, "a cancelled call ran"
    done = await store.get_execution(queued.id)
    assert done is not None and done.outcome == "cancelled", done
    assert done.result is not None and done.result["side_effect"]["attempted"] is False
    assert settled.outcome == "cancelled"
    events = await store.events(queued.id)
    note = next(e.data for e in events if e.data.get("by") == "recovery")
    assert note["owner"] == DEAD and note["status"] == "cancelled", note
    assert [e.type for e in events].count("tool.started") == 0


async def test_take_over_moves_only_an_unstarted_call_from_the_owner_found_gone(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = _services(tmp_path, store, catalogue, Blocking())
    queued = await _queued(services)
    assert await store.claim_queued(DEAD) is not None
    assert not await store.take_over(queued.id, WORKER, Status.QUEUED, None)  # not its owner
    started = make_event(queued.id, 0, "tool.started", {})
    await store.append(queued.id, [started])
    assert not await store.take_over(queued.id, DEAD, Status.QUEUED, None)  # it started
    now = await store.get_execution(queued.id)
    assert now is not None and now.status is Status.RUNNING and now.owner == DEAD


async def test_a_queued_call_runs_on_the_approval_its_token_spent_when_reserved(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    effect = Blocking()
    effect.release.set()
    adapter = FunctionAdapter(effect, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(_approve_first))
    parked = await run_call(services, request())
    assert parked.approval_id is not None
    decided = await store.decide_approval(parked.approval_id, "approved", "bob", None)
    approval: ApprovalRecord = decided.approval  # type: ignore[union-attr]
    token = tokens.sign(tokens.claims_for(approval), services.approval_key)
    sent = request(call_id="c2", approval_token=token)
    queued = await run_call(services, sent, respond_async=True)
    assert queued.status is Status.QUEUED  # the token's approval is spent by the reservation
    assert await store.claim_queued(DEAD) is not None
    await _dead_replica(store)

    [requeued] = await recover(services)  # DEAD was killed before it began
    assert requeued.status is Status.QUEUED
    await _drain(services, store)

    done = await store.get_execution(queued.id)
    assert done is not None and done.outcome == "succeeded", done.result
    assert effect.calls == 1
    assert (await store.get_approval(approval.id)).status == "used"  # type: ignore[union-attr]
    again = await run_call(services, request(call_id="c3", approval_token=token))
    assert again.result is not None and again.result["error"]["type"] == "approval_token_used"
