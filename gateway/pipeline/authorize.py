"""Stage 4 — policy & approval: ask the policy backend; deny, park for approval, or go on."""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

from gateway.adapters.base import SideEffectReport
from gateway.approvals import tokens
from gateway.errors import CallError, PolicyDenied, ToolgateError
from gateway.pipeline.context import adapter_call, adapter_of
from gateway.pipeline.records import Flow, ToolResult
from gateway.pipeline.services import Services
from gateway.pipeline.validate import check_state_guards
from gateway.policy.inputs import recorded_input
from gateway.store.records import ApprovalRecord
from gateway.types import JSON, Decision, DecisionResult, Outcome, Phase


def policy_input(flow: Flow) -> dict[str, Any]:
    """The stable policy input document (documented in docs/policies.md)."""
    assert flow.tool is not None and flow.workspace is not None
    req, tool = flow.request, flow.tool
    now_ms = int(time.time() * 1000)
    left = None if req.deadline_ms is None else int(req.deadline_ms - now_ms)
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
            "time_ms": now_ms,  # of this decision; a policy that never reads it keeps its cache
        },
        "approval": {
            "present": flow.approval is not None,
            "approved_by": flow.approval.decided_by if flow.approval else None,
        },
        "usage": {},
    }


async def run(services: Services, flow: Flow) -> Flow:
    if flow.request.approval_token and flow.approval is None:
        flow = flow.but(approval=await _approval_from_token(services, flow))
    if flow.approval is not None and flow.approval.arguments_sha256 != flow.arguments_sha256:
        raise PolicyDenied(
            "the approval was given for other arguments than this call", code="approval_mismatch"
        )
    document = policy_input(flow)
    decision = await services.policy.decide(document)
    recorded, truncated = recorded_input(document, services.settings.policy_input_mask)
    flow = flow.but_emit(
        {"decision": decision},
        "policy.decided",
        result=decision.result.value,
        reasons=list(decision.reasons),
        input=recorded,
        input_truncated=truncated,
        **({"decision_id": decision.decision_id} if decision.decision_id else {}),
    )
    try:
        return await _follow(services, flow, decision)
    except CallError as exc:  # failed here, the call keeps its policy.decided event
        return _failed(flow, exc)


async def _follow(services: Services, flow: Flow, decision: Decision) -> Flow:
    """Act on the decision: refuse, park for approval, or go on."""
    if decision.result is DecisionResult.DENY:
        raise PolicyDenied(
            "denied by policy: " + ("; ".join(decision.reasons) or "no reason given"),
            details={"reasons": list(decision.reasons)},
        )
    await check_state_guards(services, flow)  # only now: the caller may see this state
    if decision.result is DecisionResult.REQUIRE_APPROVAL:
        if flow.approval is not None:
            raise PolicyDenied(
                "the approval does not satisfy the policy: " + "; ".join(decision.reasons),
                code="approval_insufficient",
            )
        preview = await _preview(services, flow)
        return flow.but(awaiting=_approval(services, flow, decision.reasons, preview))
    return flow


def _failed(flow: Flow, error: CallError) -> Flow:
    """What the runner makes of a CallError raised by a stage (runner._failed), but from the
    flow after the decision: the runner would start from the flow before this stage and lose
    its policy.decided event (a denied call had none)."""
    if error.phase in (Phase.RESOLVE, Phase.VALIDATE):
        flow = flow.emit("tool.validation_failed", **error.to_json())
    result = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(flow.tool.version) if flow.tool else None,
        outcome=Outcome.FAILED,
        error=error,
        side_effect=SideEffectReport(False, False, "nothing was attempted"),
    )
    return flow.but(result=result)


async def _approval_from_token(services: Services, flow: Flow) -> ApprovalRecord:
    """The approved approval an ``approval_token`` stands for, checked against this call."""
    assert flow.tool is not None and flow.request.approval_token is not None
    claims = tokens.verify(flow.request.approval_token, services.approval_key)
    call = {
        "tool": flow.tool.name,
        "version": str(flow.tool.version),
        "arguments_sha256": flow.arguments_sha256 or "",
        "actor": flow.request.principal,
        "workspace": flow.request.workspace_id,
    }
    tokens.check_binding(claims, **call)
    approval = await services.store.get_approval(claims.approval_id)
    if approval is None or approval.status != "approved":
        state = approval.status if approval else "unknown"
        raise PolicyDenied(
            f"approval_token refused: its approval is {state}, not approved (a token is "
            "good for one call)",
            code="approval_token_used" if state == "used" else "approval_token_invalid",
        )
    tokens.check_binding(tokens.claims_for(approval), **call)  # the record, not the claims
    return approval


async def _preview(services: Services, flow: Flow) -> JSON:
    """What the approver will see of the effect, when the adapter can tell (e.g. a diff)."""
    adapter = adapter_of(services, flow)
    preview = getattr(adapter, "preview", None)
    if preview is None:
        return None
    try:
        return cast(JSON, await preview(adapter_call(services, flow)))
    except ToolgateError as exc:
        return {"error": exc.message}


def _approval(
    services: Services, flow: Flow, reasons: tuple[str, ...], preview: JSON
) -> ApprovalRecord:
    assert flow.tool is not None and flow.workspace is not None
    now = int(time.time() * 1000)
    expires_ms = now + int(services.settings.approval_ttl * 1000)
    if flow.request.deadline_ms is not None:  # past its deadline the call can no longer run
        expires_ms = min(expires_ms, flow.request.deadline_ms)
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
        arguments=dict(flow.arguments or {}),
        preview=preview,
        requested_ms=now,
        expires_ms=expires_ms,
    )
