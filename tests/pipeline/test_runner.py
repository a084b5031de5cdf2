"""The pipeline's logic with fake adapters and policies, on a real SQLite store."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import anyio
import pytest

from gateway.adapters.base import AdapterCall, AdapterOutcome, SideEffectReport
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.loader import load_catalogue
from gateway.errors import ExecutionError
from gateway.pipeline.records import ToolExecutionRequest
from gateway.pipeline.runner import STAGES, run_call
from gateway.pipeline.services import Services
from gateway.settings import load_settings
from gateway.store.store import Store
from gateway.types import JSON, Decision, DecisionResult, Outcome, Status
from gateway.workspace import Workspace
from tests.conftest import REPO
from tests.pipeline.fakes import FunctionAdapter, FunctionPolicy, allow_all

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
    return Services(
        settings=settings,
        catalogue=catalogue,
        policy=policy,
        policy_data={"actors": {"alice": {"roles": ["agent"]}}},
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
    async def slow(call: AdapterCall) -> AdapterOutcome:
        await anyio.sleep(5)
        raise AssertionError("not reached")

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
