"""The pipeline's logic with fake adapters and policies, on a real SQLite store."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from gateway.adapters.base import AdapterCall, AdapterOutcome, SideEffectReport
from gateway.declarations.catalogue import Catalogue
from gateway.errors import ExecutionError
from gateway.pipeline.records import ToolExecutionRequest
from gateway.pipeline.runner import STAGES, run_call
from gateway.pipeline.services import Services
from gateway.policy.data import PolicyData
from gateway.runtime.container import Runtime
from gateway.settings import load_settings
from gateway.store.store import Store
from gateway.testing import load_catalogue
from gateway.types import JSON, Decision, DecisionResult, Outcome, Status
from gateway.workspace import Workspace
from tests.helpers import REPO
from tests.pipeline.fakes import FunctionAdapter, FunctionPolicy, allow_all, slow

pytestmark = pytest.mark.anyio


@pytest.fixture
def catalogue() -> Catalogue:
    return load_catalogue(REPO / "tools.d")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    await s.open()
    yield s
    await s.aclose()


def make_services(
    tmp_path: Path,
    store: Store,
    catalogue: Catalogue,
    adapter: FunctionAdapter,
    policy: FunctionPolicy,
) -> Services:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    settings = load_settings(REPO / "toolgate.yaml", env={}, lock_lease="2s")
    return Runtime(
        settings=settings,
        catalogue=catalogue,
        policy=policy,
        policy_data=PolicyData.parse({"actors": {"alice": {"roles": ["agent"]}}}),
        workspaces={"demo": Workspace("demo", root.resolve())},
        store=store,
        adapters={"file": adapter},
    )


def request(tool: str = "fs.write_file", **kw: object) -> ToolExecutionRequest:
    fields: dict[str, object] = dict(
        principal="alice",
        run_id="r",
        turn_id="t",
        call_id="c1",
        tool_name=tool,
        requested_version=None,
        arguments={"path": "a.txt", "content": "hi"},
        agent_id="agent",
        workspace_id="demo",
        workspace_root=None,
        deadline_ms=None,
        cancellation_token=None,
        idempotency_key=None,
        approval_token=None,
        expected_state={},
        body={},
    )
    fields.update(kw)
    return ToolExecutionRequest(**fields)  # type: ignore[arg-type]


async def ok(call: AdapterCall) -> AdapterOutcome:
    return AdapterOutcome(Outcome.SUCCEEDED, {"ok": True}, SideEffectReport(True, True, "done"))


def sha_probe(value: str | None) -> object:
    async def probe(name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        return value

    return probe


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


async def test_policy_deny_never_calls_the_adapter(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter = FunctionAdapter(ok)
    policy = FunctionPolicy(lambda d: Decision(DecisionResult.DENY, ("no writes today",)))
    record = await run_call(make_services(tmp_path, store, catalogue, adapter, policy), request())
    result = record.result
    assert result is not None and result["outcome"] == "failed"
    assert result["error"]["phase"] == "policy" and "no writes today" in result["error"]["message"]
    assert adapter.calls == []
    doc = policy.inputs[0]
    assert doc["tool"]["name"] == "fs.write_file" and doc["actor"]["roles"] == ["agent"]
    assert doc["paths"] == [{"argument": "path", "relative": "a.txt", "inside_workspace": True}]


async def test_require_approval_parks_the_call(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter = FunctionAdapter(ok)
    policy = FunctionPolicy(lambda d: Decision(DecisionResult.REQUIRE_APPROVAL, ("risky",)))
    record = await run_call(make_services(tmp_path, store, catalogue, adapter, policy), request())
    assert record.status is Status.AWAITING_APPROVAL and record.approval_id
    assert adapter.calls == []
    types = [e.type for e in await store.events(record.id)]
    assert types[-2:] == ["approval.requested", "state.checkpointed"]


async def test_adapter_error_is_failed_in_execute(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    async def boom(call: AdapterCall) -> AdapterOutcome:
        raise ExecutionError("disk on fire", code="file_error", retryable=True)

    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(boom), FunctionPolicy(allow_all)
    )
    result = (await run_call(services, request())).result
    assert result is not None and result["outcome"] == "failed"
    assert result["error"] == {
        "type": "file_error",
        "phase": "execute",
        "retryable": True,
        "message": "disk on fire",
    }


async def test_unexpected_crash_of_a_write_without_proof_is_unknown(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    async def crash(call: AdapterCall) -> AdapterOutcome:
        raise RuntimeError("secret internal detail")

    # The reconcile probe cannot tell (returns a different hash): the effect did not happen.
    services = make_services(
        tmp_path,
        store,
        catalogue,
        FunctionAdapter(crash, sha_probe("other")),
        FunctionPolicy(allow_all),
    )
    result = (await run_call(services, request())).result
    assert result is not None and result["outcome"] == "failed"
    assert "secret internal detail" not in result["error"]["message"]
    # fs.apply_patch declares no reconcile probe: nobody can tell, so the outcome is unknown.
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(crash), FunctionPolicy(allow_all)
    )
    req = request("fs.apply_patch", call_id="c2", arguments={"path": "a.txt", "patch": "x"})
    result = (await run_call(services, req)).result
    assert result is not None and result["outcome"] == "unknown"
    assert result["side_effect"]["attempted"] is True


async def test_timeout_reconciled_as_succeeded_when_the_effect_is_there(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    import time

    services = make_services(
        tmp_path,
        store,
        catalogue,
        FunctionAdapter(slow, sha_probe(hashlib.sha256(b"hi").hexdigest())),
        FunctionPolicy(allow_all),
    )
    deadline = int(time.time() * 1000) + 200
    result = (await run_call(services, request(deadline_ms=deadline))).result
    assert result is not None and result["outcome"] == "succeeded"
    assert result["side_effect"]["summary"].startswith("reconciled")


async def test_verification_mismatch_is_not_succeeded(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path,
        store,
        catalogue,
        FunctionAdapter(ok, sha_probe("not-the-hash")),
        FunctionPolicy(allow_all),
    )
    result = (await run_call(services, request())).result
    assert result is not None and result["outcome"] == "failed"
    assert result["error"]["phase"] == "verify"
    probes = [e for e in result["evidence"] if e["kind"] == "probe"]
    assert probes[0]["passed"] is False


async def test_lock_held_elsewhere_times_out_retryable(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    import time

    from gateway.store.records import LockRequest
    from gateway.types import LockMode

    await store.try_acquire(
        "ex_other", "other-call", [LockRequest("ws:demo:file:a.txt", LockMode.EXCLUSIVE)], 30
    )
    adapter = FunctionAdapter(ok)
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    result = (await run_call(services, request(deadline_ms=int(time.time() * 1000) + 300))).result
    assert result is not None and result["error"]["type"] == "lock_timeout"
    assert result["error"]["retryable"] is True and "other-call" in result["error"]["message"]
    assert adapter.calls == []


async def _cancel_soon(services: Services, store: Store) -> None:
    """Cancel the first execution that shows up running, the way the API does."""
    from gateway.runtime import cancellation

    for _ in range(200):
        running = await store.unfinished([Status.RUNNING])
        started = [
            r for r in running if any(e.type == "tool.started" for e in await store.events(r.id))
        ]
        if started:
            await cancellation.cancel(services, started[0], "bob")
            return
        await anyio.sleep(0.01)
    raise AssertionError("nothing started")


async def test_cancel_reaches_a_cooperative_adapter(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    async def polite(call: AdapterCall) -> AdapterOutcome:
        await call.cancelled.wait()
        return AdapterOutcome(Outcome.CANCELLED, None, SideEffectReport(False, False, "stopped"))

    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(polite), FunctionPolicy(allow_all)
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_soon, services, store)
        record = await run_call(services, request())
    assert record.outcome == "cancelled"
    types = [e.type for e in await store.events(record.id)]
    assert "state.checkpointed" in types and types[-1] == "tool.completed"


async def test_cancel_cuts_off_a_deaf_adapter_then_reconciles(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    async def deaf(call: AdapterCall) -> AdapterOutcome:
        await anyio.sleep(30)
        raise AssertionError("not reached")

    # The reconcile probe finds the content absent: the cut-off call is cancelled, not failed.
    services = make_services(
        tmp_path,
        store,
        catalogue,
        FunctionAdapter(deaf, sha_probe(None)),
        FunctionPolicy(allow_all),
    )
    services = replace(
        services, settings=services.settings.model_copy(update={"cancel_grace": 0.1})
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_soon, services, store)
        record = await run_call(services, request())
    result = record.result
    assert result is not None and result["outcome"] == "cancelled"
    assert result["error"]["type"] == "cancelled"
    assert result["side_effect"]["summary"] == "reconciled: the side effect did not happen"


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


async def test_recovery_settles_what_a_dead_owner_left(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    from gateway.adapters.file.adapter import FileAdapter
    from gateway.events.model import make_event
    from gateway.recovery import recover

    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    services = replace(services, adapters={"file": FileAdapter()})
    record = await run_call(services, request(call_id="seed"))  # a real execution to copy
    dead = "nohost:1:1"  # another host, heartbeat stale: its owner is gone
    stale = record.created_ms - 10 * 60_000
    started = replace(
        record,
        id="ex_dead1",
        call_id="d1",
        status=Status.RUNNING,
        outcome=None,
        result_json=None,
        owner=dead,
        updated_ms=stale,
        payload_sha256="p1",
    )
    unstarted = replace(started, id="ex_dead2", call_id="d2", payload_sha256="p2")
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
    settled = {r.id: r for r in await recover(services)}
    # The file holds "hi" (written by the seed call), which is what ex_dead1 meant to write.
    assert settled["ex_dead1"].outcome == "succeeded"
    assert settled["ex_dead2"].status is Status.QUEUED  # nothing was attempted: run it again


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


async def test_cancel_while_waiting_for_locks_is_not_lost(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    import time

    from gateway.runtime import cancellation
    from gateway.store.records import LockRequest
    from gateway.types import LockMode

    key = [LockRequest("ws:demo:file:a.txt", LockMode.EXCLUSIVE)]
    await store.try_acquire("ex_holder", "holder", key, 30)
    adapter = FunctionAdapter(ok)
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))

    async def cancel_then_release() -> None:
        for _ in range(300):
            waiting = await store.unfinished([Status.RUNNING])
            if waiting:
                await cancellation.cancel(services, waiting[0], "bob")
                await store.release_locks("ex_holder")
                return
            await anyio.sleep(0.01)
        raise AssertionError("the call never reserved")

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_then_release)
        record = await run_call(services, request(deadline_ms=int(time.time() * 1000) + 5000))
    assert record.outcome == "cancelled"
    assert adapter.calls == []
    assert "tool.started" not in [e.type for e in await store.events(record.id)]


async def test_a_failure_after_the_side_effect_is_settled_by_recovery(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    from gateway.errors import StoreError
    from gateway.faults import Faults
    from gateway.recovery import recover

    adapter = FunctionAdapter(ok, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    # The store fails after the side effect: nothing can be recorded, recovery settles it.
    # (Any other exception there is settled by the call itself: tests/pipeline/test_catchall.)
    faulty = replace(services, faults=Faults.parse("after_side_effect:store_unavailable"))
    with pytest.raises(StoreError):
        await run_call(faulty, request())
    [left] = await store.unfinished([Status.RUNNING])
    settled = await recover(services)
    assert [r.id for r in settled] == [left.id]
    assert settled[0].outcome == "succeeded"  # the reconcile probe found the content
    assert settled[0].result is not None
    assert "recovered" in settled[0].result["side_effect"]["summary"]


async def test_no_side_effect_starts_once_the_deadline_has_passed(
    tmp_path: Path, store: Store, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 §5: a call that passed validation with 1 ms left started its adapter and
    ended ``timeout`` with something attempted. The clock the last check reads is moved past
    the deadline once the locks are held: deterministic, no race with the real clock."""
    import time

    from gateway.pipeline import execute

    adapter = FunctionAdapter(ok, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    deadline = int(time.time() * 1000) + 60_000
    # raising=False: on the code before the fix the seam did not exist, and the test fails
    # on its assertions, not on the patch.
    monkeypatch.setattr(execute, "_now", lambda: deadline / 1000 + 0.001, raising=False)
    record = await run_call(services, request(deadline_ms=deadline, idempotency_key="k"))
    result = record.result
    assert record.status is Status.COMPLETED and result is not None
    assert result["outcome"] == "failed" and result["error"]["type"] == "deadline_exceeded"
    assert result["error"]["phase"] == "execute" and result["error"]["retryable"] is True
    assert result["side_effect"]["attempted"] is False
    assert adapter.calls == []
    assert await store.unfinished([Status.RUNNING]) == []
    # With less than START_FLOOR left it does not start either; with more, it runs.
    floor = getattr(execute, "START_FLOOR", 0.01)
    monkeypatch.setattr(execute, "_now", lambda: deadline / 1000 - floor / 2, raising=False)
    record = await run_call(services, request(call_id="c2", deadline_ms=deadline))
    assert record.outcome == "failed" and adapter.calls == []
    monkeypatch.setattr(execute, "_now", time.time, raising=False)
    record = await run_call(services, request(call_id="c3", deadline_ms=deadline))
    assert record.outcome == "succeeded" and len(adapter.calls) == 1
