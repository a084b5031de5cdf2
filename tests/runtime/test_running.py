"""The executions a process runs (``Running``, gateway/runtime/signals.py), which recovery
leaves alone: one execution may have two flows in one process at once."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.adapters.base import AdapterCall, AdapterOutcome
from gateway.declarations.catalogue import Catalogue
from gateway.pipeline.runner import run_call
from gateway.runtime.approvals import resume
from gateway.runtime.recovery import recover, takeover
from gateway.runtime.signals import Running
from gateway.store.records import ApprovalRecord
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


def _approve_first(document: Mapping[str, Any]) -> Decision:
    if document["approval"]["present"]:
        return Decision(DecisionResult.ALLOW, ("approved",))
    return Decision(DecisionResult.REQUIRE_APPROVAL, ("risky",))


def test_an_execution_runs_until_the_last_of_its_flows_here_ends() -> None:
    running = Running()
    running.add("ex_1")
    running.add("ex_1")
    running.discard("ex_1")
    assert "ex_1" in running and len(running) == 1
    running.discard("ex_1")
    assert "ex_1" not in running and len(running) == 0
    running.discard("ex_1")  # one discard too many changes nothing
    running.add("ex_1")
    assert "ex_1" in running


@pytest.mark.anyio
async def test_a_second_resume_in_the_same_process_leaves_the_first_one_running_alone(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    # Two resumes of one approval in one process (the workers' sweep started one while the
    # decision's own resume had not yet registered): the loser writes nothing and ends while
    # the winner runs. It used to take the execution out of the running set with it, and
    # this process's next recovery pass took the winner's call over as left behind.
    started, release = anyio.Event(), anyio.Event()

    async def gated(call: AdapterCall) -> AdapterOutcome:
        started.set()
        await release.wait()
        return await ok(call)

    adapter = FunctionAdapter(gated, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(_approve_first))
    parked = await run_call(services, request())
    assert parked.approval_id is not None
    decided = await store.decide_approval(parked.approval_id, "approved", "bob", None)
    approval: ApprovalRecord = decided.approval  # type: ignore[union-attr]
    async with anyio.create_task_group() as tg:
        tg.start_soon(resume, services, approval)
        await started.wait()  # the winner runs the adapter
        await resume(services, approval)  # the loser: nothing to resume, it ends
        running = await store.get_execution(parked.id)
        assert running is not None and running.status is Status.RUNNING
        assert parked.id in services.active, "the loser took the winner's call out"
        assert takeover(services, running, {}, int(time.time() * 1000)) is None
        assert await recover(services) == []
        release.set()
    done = await store.get_execution(parked.id)
    assert done is not None and done.outcome == "succeeded" and len(adapter.calls) == 1
    assert parked.id not in services.active
