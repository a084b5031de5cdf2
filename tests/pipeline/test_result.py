"""Stage result (gateway/pipeline/result.py): the adapter's outcome or failure becomes a
stable ToolResult; uncertain writes are reconciled."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from gateway.adapters.base import AdapterCall, AdapterOutcome, SideEffectReport
from gateway.declarations.catalogue import Catalogue
from gateway.errors import ExecutionError
from gateway.pipeline.runner import run_call
from gateway.pipeline.services import Services
from gateway.store.store import Store
from gateway.types import Outcome
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    prepared,
    request,
    sha_probe,
    slow,
)

pytestmark = pytest.mark.anyio


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


async def test_an_adapter_outcome_becomes_a_result_verify_may_check(services: Services) -> None:
    from gateway.pipeline import result
    from gateway.pipeline.records import Executed

    state = await prepared(services, request())
    outcome = AdapterOutcome(Outcome.SUCCEEDED, {"ok": True}, SideEffectReport(True, True, "done"))
    call, trail = state.call, state.trail
    started = call.ticket.received_ms + 5
    settled = await result.run(
        services, Executed(call, None, {}, started, started + 7, outcome, trail)
    )
    assert settled.ran is call and settled.result.outcome is Outcome.SUCCEEDED
    assert (settled.result.queued_ms, settled.result.running_ms) == (5, 7)
    assert settled.trail.events[-1].type == "tool.side_effect_observed"
    # A failure is no outcome to verify: nothing was read back.
    error = ExecutionError("refused", code="file_error")
    failed = await result.run(services, Executed(call, None, {}, started, started, error, trail))
    assert failed.ran is None and failed.result.outcome is Outcome.FAILED
    assert failed.result.side_effect.attempted is True  # a write's adapter was called
