"""Dry-run plans (gateway/pipeline/plan.py): who would approve, as the decision names them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.pipeline.plan import plan_call
from gateway.pipeline.runner import run_call
from gateway.store.store import Store
from gateway.types import JSON, Decision, DecisionResult, Status
from tests.pipeline.fakes import FunctionAdapter, FunctionPolicy, make_services, ok, request

pytestmark = pytest.mark.anyio


def approval_with(**extra: JSON) -> FunctionPolicy:
    """A policy that wants approval for every call, its decision carrying ``extra``."""
    return FunctionPolicy(lambda d: Decision(DecisionResult.REQUIRE_APPROVAL, ("look",), extra))


async def test_a_plan_names_the_approvers_of_the_decision(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    """The data names no approver (nobody could approve); the decision names "security":
    the plan says "security", and the real call's policy.decided event records it."""
    policy = approval_with(approver_roles=["security"])
    services = make_services(tmp_path, store, catalogue, FunctionAdapter(ok), policy)
    assert services.policy_data.approvers.roles_for("medium") == ()
    plan = await plan_call(services, request())
    assert plan.would == "await_approval" and plan.policy is not None
    assert plan.policy["approval"] == {
        "required": True,
        "approver_roles": ["security"],
        "approver_roles_from": "decision",
        "self_approval": False,
    }
    record = await run_call(services, request())
    assert record.status is Status.AWAITING_APPROVAL
    (decided,) = [e for e in await store.events(record.id) if e.type == "policy.decided"]
    assert decided.data["approver_roles"] == ["security"]


@pytest.mark.parametrize(
    "extra",
    [{}, {"approver_roles": "security"}, {"approver_roles": ["security", 7]}],
    ids=["none", "a string", "not all strings"],
)
async def test_without_approvers_in_the_decision_a_plan_names_the_data_s(
    tmp_path: Path, store: Store, catalogue: Catalogue, extra: dict[str, JSON]
) -> None:
    """No approver_roles in the decision, or not a list of strings: the data's approvers
    (none here), labelled as such."""
    policy = approval_with(**extra)
    services = make_services(tmp_path, store, catalogue, FunctionAdapter(ok), policy)
    plan = await plan_call(services, request())
    assert plan.policy is not None
    approval = plan.policy["approval"]
    assert isinstance(approval, dict)
    assert approval["approver_roles"] == [] and approval["approver_roles_from"] == "policy_data"


async def test_an_allowed_call_records_no_approvers(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    """Only a require_approval decision's approver_roles are recorded."""
    policy = FunctionPolicy(
        lambda d: Decision(DecisionResult.ALLOW, ("fine",), {"approver_roles": ["x"]})
    )
    services = make_services(tmp_path, store, catalogue, FunctionAdapter(ok), policy)
    plan = await plan_call(services, request())
    assert plan.policy is not None and plan.policy["approval"] == {"required": False}
    record = await run_call(services, request(idempotency_key="k"))
    (decided,) = [e for e in await store.events(record.id) if e.type == "policy.decided"]
    assert "approver_roles" not in decided.data
