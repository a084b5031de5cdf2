"""Stage policy (gateway/pipeline/policy.py): the decision, the policy input, approvals."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.pipeline.runner import run_call
from gateway.store.store import Store
from gateway.types import Decision, DecisionResult, Status
from tests.pipeline.fakes import FunctionAdapter, FunctionPolicy, make_services, ok, request

pytestmark = pytest.mark.anyio


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
