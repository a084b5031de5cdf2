"""A call claimed twice by the workers of one process runs once (gateway/runtime/worker.py).

Both claims carry this process's id as owner, so the fence on ``tool.started``
(pipeline/execute.py: written only while the flow's owner still has the call) lets both
flows through. Two ways a call this process claimed comes back to its queue before its
flow started it, both made deterministic with a store that pauses one party:

- this process's own recovery pass reads the call between its claim's COMMIT and the
  moment its worker learns of it (the claim's answer is late: the writer thread is slow to
  hand it over on a busy machine), finds it owned here and run by no flow, and takes it for
  left behind;
- another replica's recovery takes this process for gone (its lease ran out under a long
  pause) while the flow is on its way to ``tool.started``.

Either way recovery's ``store.take_over`` requeues it (it never started), and another
worker of this process claims it again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.instance import INSTANCE_ID
from gateway.runtime.container import Runtime
from gateway.runtime.recovery import recover
from gateway.runtime.worker import _work
from gateway.store.records import ExecutionRecord
from gateway.store.store import Store
from tests.runtime.test_takeover_races import Blocking, _queued, _services

pytestmark = pytest.mark.anyio


class Claims:
    """``store.claim_queued`` watched: the first claim that gets a call runs ``meanwhile``
    after its COMMIT and before its worker learns of it; ``again`` is set once a later
    claim has got a call (its worker has then decided what to do with it); ``back`` once a
    claim begins after that: a worker done with its copy of the call is back at the queue."""

    def __init__(self, store: Store, meanwhile: Callable[[], Awaitable[None]]) -> None:
        self.real = store.claim_queued
        self.meanwhile = meanwhile
        self.got = 0
        self.again, self.back = anyio.Event(), anyio.Event()
        store.claim_queued = self.claim  # type: ignore[method-assign]

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        if self.again.is_set():
            self.back.set()
        record = await self.real(*args, **kwargs)
        if record is not None:
            self.got += 1
            if self.got == 1:
                await self.meanwhile()
            else:
                self.again.set()
        return record


async def _workers_run_it(
    runtime: Runtime, store: Store, claims: Claims, effect: Blocking, execution: str
) -> None:
    """Two workers of ``runtime`` until ``execution`` completed and nothing runs here."""
    claimed: set[str] = set()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(_work, runtime, claimed)
            await effect.running.wait()
            # One worker holds the call in the adapter: the other is back at the queue once
            # it is done with its copy, which a second flow would have run to the adapter.
            await claims.back.wait()
            effect.release.set()
            while True:
                done = await store.get_execution(execution)
                if done is not None and done.terminal and not len(runtime.active):
                    break
                await anyio.sleep(0.05)
            tg.cancel_scope.cancel()


async def _ran_once_after_two_claims(
    store: Store, claims: Claims, effect: Blocking, execution: str
) -> ExecutionRecord:
    """Claimed twice, requeued once by recovery, started, run and completed once."""
    assert claims.got == 2
    assert effect.calls == 1, "the side effect ran twice"
    done = await store.get_execution(execution)
    assert done is not None and done.outcome == "succeeded", done
    events = await store.events(execution)
    notes = [e.data for e in events if e.data.get("by") == "recovery"]
    assert [n["status"] for n in notes] == ["queued"], notes
    types = [e.type for e in events]
    assert types.count("tool.started") == 1 and types.count("tool.completed") == 1, types
    return done


async def test_a_call_requeued_here_between_its_claim_and_its_worker_runs_once(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    effect = Blocking()
    runtime = _services(tmp_path, store, catalogue, effect)
    assert isinstance(runtime, Runtime)
    queued = await _queued(runtime)

    async def recovery_here_before_the_worker_knows() -> None:
        assert len(await recover(runtime)) == 1  # owned here, run by no flow: "left behind"
        await claims.again.wait()  # the other worker, woken, claimed it again

    claims = Claims(store, recovery_here_before_the_worker_knows)
    await _workers_run_it(runtime, store, claims, effect, queued.id)

    done = await _ran_once_after_two_claims(store, claims, effect, queued.id)
    assert done.owner == INSTANCE_ID, done


async def test_a_call_requeued_by_a_replica_that_took_this_one_for_gone_runs_once(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    effect = Blocking()
    runtime = _services(tmp_path, store, catalogue, effect)
    survivor = _services(tmp_path, store, catalogue, effect)
    assert isinstance(runtime, Runtime)
    queued = await _queued(runtime)
    claims = Claims(store, anyio.lowlevel.checkpoint)
    real_append = store.append
    paused = False

    async def append(execution_id: str, events: Any) -> None:
        # The flow, once dequeued, pauses (a long pause: its lease runs out meanwhile).
        nonlocal paused
        await real_append(execution_id, events)
        if not paused:
            paused = True
            # The survivor does not see this process's flow: to it, the owner is gone.
            assert len(await recover(survivor)) == 1
            runtime.wake_workers()  # or its next look at the queue, a second later
            await claims.again.wait()

    store.append = append  # type: ignore[method-assign]
    await _workers_run_it(runtime, store, claims, effect, queued.id)

    await _ran_once_after_two_claims(store, claims, effect, queued.id)


async def test_a_flow_whose_call_was_requeued_and_claimed_here_again_does_not_cancel_it(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    """The flow's fence finds the call queued again (taken for gone), and reads it back once
    another worker here has claimed it: it is this process's and running, no cancel came.
    The flow leaves it (it ends it neither cancelled nor otherwise), the second worker too
    (the first still runs it), and recovery here finds it left behind and runs it, once."""
    effect = Blocking()
    effect.release.set()
    runtime = _services(tmp_path, store, catalogue, effect)
    survivor = _services(tmp_path, store, catalogue, effect)
    assert isinstance(runtime, Runtime)
    queued = await _queued(runtime)
    claims = Claims(store, anyio.lowlevel.checkpoint)
    real_append, real_set_status = store.append, store.set_status
    requeued, fenced = anyio.Event(), anyio.Event()

    async def append(execution_id: str, events: Any) -> None:
        await real_append(execution_id, events)
        if not requeued.is_set():  # the flow, dequeued, pauses; its lease runs out
            requeued.set()
            assert len(await recover(survivor)) == 1

    async def set_status(*args: Any, **kwargs: Any) -> bool:
        moved: bool = await real_set_status(*args, **kwargs)
        if not moved and not fenced.is_set():  # tool.started refused: the call was requeued
            fenced.set()
            runtime.wake_workers()
            await claims.again.wait()  # claimed here again before the flow reads it back
        return moved

    store.append = append  # type: ignore[method-assign]
    store.set_status = set_status  # type: ignore[method-assign]
    claimed: set[str] = set()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(_work, runtime, claimed)
            await claims.again.wait()
            while len(runtime.active):  # the first flow ends
                await anyio.sleep(0.05)
            await recover(runtime)  # the next pass here: nothing runs the call
            while not (done := await store.get_execution(queued.id)) or not done.terminal:
                await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    done = await store.get_execution(queued.id)
    assert done is not None and done.outcome == "succeeded", done
    assert effect.calls == 1
    events = await store.events(queued.id)
    notes = [e.data["because"] for e in events if e.data.get("by") == "recovery"]
    assert notes == ["left_behind", "left_behind"], notes  # the survivor's, then this one's
