"""Stage policy (gateway/pipeline/policy.py): the decision, the policy input, approvals."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.errors import PolicyUnavailable
from gateway.pipeline.policy import tool_input
from gateway.pipeline.runner import run_call, run_queued
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


class Outage:
    """The decision of a policy backend that may lose its service (``down``: it raises
    PolicyUnavailable, as the OPA backend does when OPA gives no decision)."""

    down = False

    def __call__(self, document: Mapping[str, Any]) -> Decision:
        if self.down:
            raise PolicyUnavailable("connection")
        return Decision(DecisionResult.ALLOW, ("test: allow",))


async def test_no_decision_refuses_a_new_call_and_records_nothing(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter, outage = FunctionAdapter(ok), Outage()
    outage.down = True
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(outage))
    with pytest.raises(PolicyUnavailable) as refused:
        await run_call(services, request())
    assert (refused.value.code, refused.value.retryable) == ("policy_unavailable", True)
    assert adapter.calls == []
    assert await store.find_executions("alice", "r", "c1") == []


async def test_no_decision_fails_a_queued_call_without_running_it(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    """A call accepted (queued) while the policy answered, whose worker then gets no
    decision: it ends failed in phase policy, retryable, and nothing ran."""
    adapter, outage = FunctionAdapter(ok), Outage()
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(outage))
    queued = await run_call(services, request(), respond_async=True)
    assert queued.status is Status.QUEUED
    outage.down = True
    record = await run_queued(services, queued)
    result = record.result
    assert record.status is Status.COMPLETED and result is not None, record
    assert result["outcome"] == "failed"
    error = result["error"]
    assert (error["type"], error["phase"], error["retryable"]) == (
        "policy_unavailable",
        "policy",
        True,
    )
    assert result["side_effect"]["attempted"] is False
    assert adapter.calls == []


async def test_the_tool_part_of_the_input_is_the_declarations_own(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    """Made once per declaration, on it (no cache keyed by identity beside it); what a
    caller may change is a copy."""
    policy = FunctionPolicy(lambda d: Decision(DecisionResult.ALLOW))
    services = make_services(tmp_path, store, catalogue, FunctionAdapter(ok), policy)
    await run_call(services, request(call_id="c1"))
    await run_call(services, request(call_id="c2"))
    tool = catalogue.versions("fs.write_file")[0]
    assert policy.inputs[0]["tool"] is policy.inputs[1]["tool"] is tool.policy_input
    copied = tool_input(tool)
    assert copied == tool.policy_input and copied is not tool.policy_input
