"""The shipped rego/ and policies/ give the expected decisions."""

from __future__ import annotations

import asyncio

import pytest

from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources
from gateway.types import Decision, DecisionResult
from tests.policy.helpers import make_input

ALLOW, APPROVAL, DENY = (
    DecisionResult.ALLOW,
    DecisionResult.REQUIRE_APPROVAL,
    DecisionResult.DENY,
)
DELETE = {"name": "fs.delete_file"}


def reasons(decision: Decision) -> str:
    return " | ".join(decision.reasons)


def test_alice_may_write_in_demo(policy: EmbeddedPolicy) -> None:
    decision = policy.decide_sync(make_input())
    assert decision.result is ALLOW
    assert "risk_rules.medium.roles" in reasons(decision)


def test_delete_file_requires_approval(policy: EmbeddedPolicy) -> None:
    decision = policy.decide_sync(make_input(tool=DELETE))
    assert decision.result is APPROVAL
    assert "tool_overrides.fs.delete_file.approval" in reasons(decision)
    assert decision.extra == {"approver_roles": ["approver"]}


def test_approval_by_bob_allows(policy: EmbeddedPolicy) -> None:
    doc = make_input(tool=DELETE, approval={"present": True, "approved_by": "bob"})
    decision = policy.decide_sync(doc)
    assert decision.result is ALLOW
    assert "approved by 'bob'" in reasons(decision)


def test_self_approval_by_carol_refused(policy: EmbeddedPolicy) -> None:
    doc = make_input(
        tool=DELETE,
        actor={"user_id": "carol"},
        approval={"present": True, "approved_by": "carol"},
    )
    decision = policy.decide_sync(doc)
    assert decision.result is DENY
    assert "approvers.allow_self_approval" in reasons(decision)


def test_carol_approving_alice_allows(policy: EmbeddedPolicy) -> None:
    doc = make_input(tool=DELETE, approval={"present": True, "approved_by": "carol"})
    assert policy.decide_sync(doc).result is ALLOW


def test_path_outside_workspace_denied(policy: EmbeddedPolicy) -> None:
    doc = make_input(
        paths=[{"argument": "path", "relative": "../../etc/passwd", "inside_workspace": False}]
    )
    decision = policy.decide_sync(doc)
    assert decision.result is DENY
    assert "outside the workspace" in reasons(decision)


@pytest.mark.parametrize("relative", [".git/config", ".toolgate", "sub/.git/HEAD"])
def test_protected_path_write_denied(policy: EmbeddedPolicy, relative: str) -> None:
    doc = make_input(paths=[{"argument": "path", "relative": relative, "inside_workspace": True}])
    decision = policy.decide_sync(doc)
    assert decision.result is DENY
    assert "protected_paths" in reasons(decision)


def test_protected_path_read_allowed(policy: EmbeddedPolicy) -> None:
    doc = make_input(
        tool={"name": "fs.read_file", "risk": "low", "side_effect": "read"},
        paths=[{"argument": "path", "relative": ".git/config", "inside_workspace": True}],
    )
    assert policy.decide_sync(doc).result is ALLOW


def test_unknown_actor_denied(policy: EmbeddedPolicy) -> None:
    decision = policy.decide_sync(make_input(actor={"user_id": "mallory"}))
    assert decision.result is DENY
    assert "actor 'mallory' is unknown" in reasons(decision)


def test_non_member_workspace_denied(policy: EmbeddedPolicy) -> None:
    decision = policy.decide_sync(make_input(workspace={"id": "ops"}))
    assert decision.result is DENY
    assert "workspaces.ops.members" in reasons(decision)


def test_roles_claimed_in_the_request_are_ignored(policy: EmbeddedPolicy) -> None:
    decision = policy.decide_sync(make_input(actor={"user_id": "bob", "roles": ["agent"]}))
    assert decision.result is DENY


def test_empty_input_denied(policy: EmbeddedPolicy) -> None:
    assert policy.decide_sync({}).result is DENY


def test_input_that_is_not_json_denied(policy: EmbeddedPolicy) -> None:
    decision = policy.decide_sync(make_input(arguments={"blob": b"\x00"}))
    assert decision.result is DENY
    assert decision.reasons[0].startswith("policy error: the input document is not JSON")


def test_async_decide_and_aclose(shipped: PolicySources) -> None:
    async def scenario() -> tuple[Decision, Decision]:
        backend = EmbeddedPolicy(shipped)
        before = await backend.decide(make_input())
        await backend.aclose()
        return before, await backend.decide(make_input())

    before, after = asyncio.run(scenario())
    assert before.result is ALLOW
    assert after.result is DENY
    assert after.reasons == ("policy error: the policy backend is closed",)
