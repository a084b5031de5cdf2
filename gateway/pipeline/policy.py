"""Stage 4 — policy & approval: ask the policy backend; deny, park for approval, or go on."""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

from gateway.adapters.base import PolicyViewing, Previewing
from gateway.approvals import tokens
from gateway.declarations.model import ToolDeclaration
from gateway.errors import (
    CallError,
    PolicyDenied,
    PolicyUnavailable,
    ToolgateError,
    TooManyRequests,
)
from gateway.pipeline.context import adapter_call, adapter_of, template_context
from gateway.pipeline.guards import check_state_guards
from gateway.pipeline.outcomes import failed
from gateway.pipeline.records import Authorized, Call, Prepared, Settled, Ticket, Trail
from gateway.pipeline.services import Services
from gateway.policy.inputs import recorded_input
from gateway.store.records import ApprovalRecord
from gateway.types import JSON, Decision, DecisionResult


def tool_input(tool: ToolDeclaration) -> dict[str, Any]:
    """The ``tool`` part of the policy input (docs/policies.md): what the declaration says,
    a copy its caller may change (a call's document shares ``tool.policy_input``)."""
    shared = tool.policy_input
    return {**shared, "tags": list(shared["tags"])}


def credential_input(method: str, roles: tuple[str, ...]) -> dict[str, Any]:
    """``actor.credential`` of the policy input: how the caller authenticated and the roles
    its credential itself carries (a JWT's mapped claims; docs/security.md#identities).
    The gateway fills it from the verified credential, never from the request body."""
    return {"method": method, "roles": list(roles)}


def action_input(services: Services, call: Call) -> dict[str, Any]:
    """The ``action`` part of the policy input (docs/policies.md): what the call will do, as
    its adapter renders it from the declaration and the normalised arguments (a
    ``PolicyViewing`` adapter: http, database, process); just the ``kind`` for the others (a
    file tool's resolved paths are ``paths``). A declaration the adapter cannot render for
    this call (the call could not run either) gives ``error``, why, and no other field."""
    kind = call.tool.adapter
    adapter = adapter_of(services, call)
    if not _viewing(adapter):
        return {"kind": kind}
    try:
        view = cast(PolicyViewing, adapter).policy_view(call.tool, template_context(call))
        return {"kind": kind, **view}
    except ToolgateError as exc:
        return {"kind": kind, "error": exc.message}


_VIEWING: dict[type, bool] = {}


def _viewing(adapter: object) -> bool:
    """``isinstance(adapter, PolicyViewing)``, once per adapter class: the check of a
    runtime-checkable Protocol costs tens of microseconds when it fails, on every call."""
    found = _VIEWING.get(type(adapter))
    if found is None:
        found = _VIEWING[type(adapter)] = isinstance(adapter, PolicyViewing)
    return found


def policy_input(
    call: Call,
    approval: ApprovalRecord | None = None,
    action: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The stable policy input document (documented in docs/policies.md); ``action`` is
    :func:`action_input`'s (without it, only the adapter kind)."""
    req, tool = call.ticket.request, call.tool
    now_ms = int(time.time() * 1000)
    left = None if req.deadline_ms is None else int(req.deadline_ms - now_ms)
    return {
        "tool": tool.policy_input,
        "arguments": dict(call.arguments),
        "arguments_sha256": call.arguments_sha256,
        "paths": [p.to_json() for p in call.paths.values()],
        "action": action if action is not None else {"kind": tool.adapter},
        "actor": {
            "user_id": req.principal,
            "agent_id": req.agent_id,
            "roles": list(call.roles),
            "credential": credential_input(req.auth_method, req.roles),
        },
        "workspace": {"id": call.workspace.id, "root": str(call.workspace.root)},
        "request": {
            "run_id": req.run_id,
            "turn_id": req.turn_id,
            "call_id": req.call_id,
            "deadline_ms_left": left,
            "idempotency_key_present": bool(req.idempotency_key),
            "time_ms": now_ms,  # of this decision; a policy that never reads it keeps its cache
        },
        "approval": {
            "present": approval is not None,
            "approved_by": approval.decided_by if approval else None,
        },
        "usage": {},
    }


async def run(services: Services, state: Prepared) -> Authorized | Settled:
    call = state.call
    approval = call.ticket.approval
    if call.ticket.request.approval_token and approval is None:
        approval = await _approval_from_token(services, call)
    if approval is not None and approval.arguments_sha256 != call.arguments_sha256:
        raise PolicyDenied(
            "the approval was given for other arguments than this call", code="approval_mismatch"
        )
    document = policy_input(call, approval, action_input(services, call))
    metrics = services.telemetry.metrics
    start = time.perf_counter()
    try:
        decision = await services.policy.decide(document)
    except PolicyUnavailable as exc:  # no decision: nothing may run (the backend logged why)
        if metrics is not None:
            metrics.policy_unavailable(services.settings.policy_backend, exc.cause)
        if call.ticket.stored is None:
            raise  # a new call: refused (503), no execution
        return failed(state, exc)  # an execution that exists (dequeued, resumed) ends here
    seconds = time.perf_counter() - start
    if metrics is not None:
        metrics.policy_decision(services.settings.policy_backend, seconds)
    if (decisions := services.telemetry.decisions) is not None:
        ids = decision_ids(call.ticket)
        decisions.write(document, decision.to_json(), seconds, ids, services.revisions.policy)
    if (shadow := services.shadow) is not None:  # queued only: never waited for, never enforced
        shadow.submit(document, decision, decision_ids(call.ticket), services.revisions.policy)
    recorded, truncated = recorded_input(document, services.settings.policy_input_mask)
    trail = state.trail.emit(
        "policy.decided",
        result=decision.result.value,
        reasons=list(decision.reasons),
        input=recorded,
        input_truncated=truncated,
        **({"decision_id": decision.decision_id} if decision.decision_id else {}),
        **(
            _approvers_named(decision) if decision.result is DecisionResult.REQUIRE_APPROVAL else {}
        ),
    )
    try:
        return await _follow(services, call, approval, decision, trail)
    except CallError as exc:  # failed here, the call keeps its policy.decided event
        return failed(Prepared(call, trail), exc)


def _approvers_named(decision: Decision) -> dict[str, JSON]:
    """The ``approver_roles`` a ``require_approval`` decision carries (the shipped policy's:
    who may approve), for its ``policy.decided`` event; a dry-run plan shows them."""
    if "approver_roles" not in decision.extra:
        return {}
    return {"approver_roles": decision.extra["approver_roles"]}


def named_approvers(decision: Decision) -> tuple[str, ...] | None:
    """The roles a decision names as its approvers (``approver_roles``, a list of strings),
    which its approval keeps and the approve route checks; ``None`` when it names none, or
    not as a list of strings: then policy data's ``approvers`` for the tool's risk decide."""
    named = decision.extra.get("approver_roles")
    if isinstance(named, list) and all(isinstance(role, str) for role in named):
        return tuple(named)
    return None


def decision_ids(ticket: Ticket) -> dict[str, str]:
    """What a decision-log event was for: an execution, or a dry-run plan (which has no
    execution: its record is this event and the ``toolgate.plans`` log line)."""
    req = ticket.request
    if ticket.dry_run:
        return {"kind": "plan", "run_id": req.run_id, "call_id": req.call_id}
    return {
        "kind": "execution",
        "execution_id": ticket.execution_id,
        "run_id": req.run_id,
        "call_id": req.call_id,
    }


async def _follow(
    services: Services,
    call: Call,
    approval: ApprovalRecord | None,
    decision: Decision,
    trail: Trail,
) -> Authorized:
    """Act on the decision: refuse, park for approval, or go on."""
    if decision.result is DecisionResult.DENY:
        raise PolicyDenied(
            "denied by policy: " + ("; ".join(decision.reasons) or "no reason given"),
            details={"reasons": list(decision.reasons)},
        )
    await check_state_guards(services, call)  # only now: the caller may see this state
    if decision.result is DecisionResult.REQUIRE_APPROVAL:
        if approval is not None:
            raise PolicyDenied(
                "the approval does not satisfy the policy: " + "; ".join(decision.reasons),
                code="approval_insufficient",
            )
        await check_pending_approvals(services, call)
        preview = await preview_of(services, call)
        if (metrics := services.telemetry.metrics) is not None:
            metrics.approval("requested")
        awaiting = _approval(services, call, decision, preview)
        return Authorized(call, approval, awaiting, trail)
    return Authorized(call, approval, None, trail)


APPROVALS_RETRY_S = 30


async def check_pending_approvals(services: Services, call: Call) -> None:
    """Refuse a new call that would park one approval request more than its principal may
    have pending (``max_pending_approvals_per_principal``): a 429, no execution, nothing
    parked. A soft bound, counted in the store (across replicas): calls racing each other
    may pass it together by a few. A call that was already accepted (dequeued) is parked."""
    ticket = call.ticket
    if ticket.stored is not None or ticket.dry_run:
        return
    principal, limit = (
        ticket.request.principal,
        services.settings.max_pending_approvals_per_principal,
    )
    pending = await services.store.pending_approvals(principal, int(time.time() * 1000), limit)
    if pending >= limit:
        if (metrics := services.telemetry.metrics) is not None:
            metrics.refused("max_pending_approvals_per_principal")
        raise TooManyRequests(
            f"{principal} already has {pending} approval requests pending (at most {limit}, "
            "max_pending_approvals_per_principal); nothing was parked: retry once some are "
            "decided",
            code="too_many_approvals",
            retry_after=APPROVALS_RETRY_S,
            details={"setting": "max_pending_approvals_per_principal", "limit": limit},
        )


async def _approval_from_token(services: Services, call: Call) -> ApprovalRecord:
    """The approved approval an ``approval_token`` stands for, checked against this call."""
    req = call.ticket.request
    assert req.approval_token is not None
    claims = tokens.verify(req.approval_token, services.approval_key)
    binding = {
        "tool": call.tool.name,
        "version": str(call.tool.version),
        "arguments_sha256": call.arguments_sha256,
        "actor": req.principal,
        "workspace": req.workspace_id,
    }
    tokens.check_binding(claims, **binding)
    approval = await services.store.get_approval(claims.approval_id)
    # A queued call (run now by a worker, perhaps after recovery queued it again) spent its
    # token's approval when it was reserved: the spend and the reservation are one
    # transaction, so a stored call carrying a token is the one call that spent it.
    spent_by_it = call.ticket.stored is not None and call.ticket.approval is None
    usable = approval is not None and (
        approval.status == "approved" or (approval.status == "used" and spent_by_it)
    )
    if approval is None or not usable:
        state = approval.status if approval else "unknown"
        raise PolicyDenied(
            f"approval_token refused: its approval is {state}, not approved (a token is "
            "good for one call)",
            code="approval_token_used" if state == "used" else "approval_token_invalid",
        )
    tokens.check_binding(tokens.claims_for(approval), **binding)  # the record, not the claims
    return approval


async def preview_of(services: Services, call: Call) -> JSON:
    """What the approver will see of the effect, when the adapter can tell (e.g. a diff)."""
    adapter = adapter_of(services, call)
    if not isinstance(adapter, Previewing):
        return None
    try:
        return await adapter.preview(adapter_call(services, call))
    except ToolgateError as exc:
        return {PREVIEW_FAILED: exc.message}


PREVIEW_FAILED = "error"
"""The one key of a preview the adapter could not make: ``{"error": why}``."""


def preview_failure(preview: JSON) -> str | None:
    """Why the adapter could not make ``preview`` (what :func:`preview_of` recorded), or None."""
    if isinstance(preview, dict) and set(preview) == {PREVIEW_FAILED}:
        return str(preview[PREVIEW_FAILED])
    return None


def _approval(services: Services, call: Call, decision: Decision, preview: JSON) -> ApprovalRecord:
    req = call.ticket.request
    now = int(time.time() * 1000)
    expires_ms = now + int(services.settings.approval_ttl * 1000)
    if req.deadline_ms is not None:  # past its deadline the call can no longer run
        expires_ms = min(expires_ms, req.deadline_ms)
    return ApprovalRecord(
        id=f"ap_{uuid.uuid4().hex}",
        execution_id=call.ticket.execution_id,
        status="pending",
        tool_name=call.tool.name,
        tool_version=str(call.tool.version),
        arguments_sha256=call.arguments_sha256,
        principal=req.principal,
        workspace_id=call.workspace.id,
        reasons=decision.reasons,
        arguments=dict(call.arguments),
        preview=preview,
        requested_ms=now,
        expires_ms=expires_ms,
        approver_roles=named_approvers(decision),
        run_id=req.run_id,
        call_id=req.call_id,
    )
