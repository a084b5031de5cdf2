"""Stage 4 — policy & approval: ask the policy backend; deny, park for approval, or go on."""

from __future__ import annotations

import time
import uuid
from typing import Any

from gateway.errors import PolicyDenied
from gateway.pipeline.records import Flow
from gateway.pipeline.services import Services
from gateway.store.records import ApprovalRecord
from gateway.types import DecisionResult


def policy_input(flow: Flow) -> dict[str, Any]:
    """The stable policy input document (documented in docs/policies.md)."""
    assert flow.tool is not None and flow.workspace is not None
    req, tool = flow.request, flow.tool
    left = None if req.deadline_ms is None else int(req.deadline_ms - time.time() * 1000)
    return {
        "tool": {
            "name": tool.name,
            "version": str(tool.version),
            "risk": tool.risk.value,
            "side_effect": tool.side_effect.value,
            "reversible": tool.reversible,
            "adapter": tool.adapter,
            "operation": tool.operation,
            "tags": list(tool.tags),
        },
        "arguments": dict(flow.arguments or {}),
        "arguments_sha256": flow.arguments_sha256,
        "paths": [p.to_json() for p in flow.paths.values()],
        "actor": {"user_id": req.principal, "agent_id": req.agent_id, "roles": list(flow.roles)},
        "workspace": {"id": flow.workspace.id, "root": str(flow.workspace.root)},
        "request": {
            "run_id": req.run_id,
            "turn_id": req.turn_id,
            "call_id": req.call_id,
            "deadline_ms_left": left,
            "idempotency_key_present": bool(req.idempotency_key),
        },
        "approval": {"present": False, "approved_by": None},
        "usage": {},
    }


async def run(services: Services, flow: Flow) -> Flow:
    decision = await services.policy.decide(policy_input(flow))
    flow = flow.but(decision=decision).emit(
        "policy.decided", result=decision.result.value, reasons=list(decision.reasons)
    )
    if decision.result is DecisionResult.DENY:
        raise PolicyDenied(
            "denied by policy: " + ("; ".join(decision.reasons) or "no reason given"),
            details={"reasons": list(decision.reasons)},
        )
    if decision.result is DecisionResult.REQUIRE_APPROVAL:
        return flow.but(awaiting=_approval(services, flow, decision.reasons))
    return flow


def _approval(services: Services, flow: Flow, reasons: tuple[str, ...]) -> ApprovalRecord:
    assert flow.tool is not None and flow.workspace is not None
    now = int(time.time() * 1000)
    return ApprovalRecord(
        id=f"ap_{uuid.uuid4().hex}",
        execution_id=flow.execution_id,
        status="pending",
        tool_name=flow.tool.name,
        tool_version=str(flow.tool.version),
        arguments_sha256=flow.arguments_sha256 or "",
        principal=flow.request.principal,
        workspace_id=flow.workspace.id,
        reasons=reasons,
        requested_ms=now,
        expires_ms=now + int(services.settings.approval_ttl * 1000),
    )
