"""Deciding approvals: who may decide, what approve and deny do, and expiry.

Approve resumes the parked execution (the gateway runs it, re-checking validation and
policy), or, with ``resume: false``, hands the agent a signed single-use approval token and
closes the parked execution as cancelled. Deny and expiry close it as failed in ``policy``;
an approval expires at the call's deadline when that comes first, and its call then fails
``deadline_exceeded``. A decision on an approval that is not pending is refused with
``approval_<status>`` (one code per ``ApprovalStatus``). Approve may carry edits of the
arguments the declaration marks editable (``runtime/edits.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from gateway.adapters.base import SideEffectReport
from gateway.approvals import tokens
from gateway.errors import (
    Conflict,
    Forbidden,
    MalformedRequest,
    NotFound,
    PolicyDenied,
    ToolgateError,
    ValidationError,
)
from gateway.pipeline.runner import resume_call
from gateway.runtime import edits as edits_of
from gateway.runtime.closing import close_execution
from gateway.runtime.container import Runtime
from gateway.store.records import ApprovalEdit, ApprovalRecord, ExecutionRecord, Refused
from gateway.types import JSON, ApprovalStatus, Outcome

log = logging.getLogger("toolgate.approvals")


@dataclass(frozen=True, slots=True)
class Verdict:
    approval: ApprovalRecord
    token: str | None = None
    resume: bool = False


def check_approver(runtime: Runtime, approval: ApprovalRecord, approver: str) -> None:
    """Forbidden unless ``approver`` holds one of the approver roles the policy's decision
    named (kept on the approval), or, where it named none, one of policy data's approver
    roles for the call's risk; and is not the requester, unless policy data allows
    self-approval. The policy checks the approver again when the call resumes."""
    data = runtime.policy_data
    if approval.approver_roles is not None:
        roles, of = approval.approver_roles, "this approval"
    else:
        risk = risk_of(runtime, approval)
        roles, of = data.approvers.roles_for(risk), f"approvals of {risk}-risk tools"
    if set(roles).isdisjoint(data.roles(approver)):
        raise Forbidden(
            f"{approver} may not decide {of} (needs one of {list(roles)})",
            code="not_an_approver",
        )
    if approver == approval.principal and not data.approvers.allow_self_approval:
        raise Forbidden("nobody approves their own request", code="self_approval")


def may_see(runtime: Runtime, approval: ApprovalRecord, principal: str) -> bool:
    """Whether ``principal`` sees ``approval`` as one who may decide it: a holder of a role
    named in policy data's ``approvers`` (they see every approval), or of one of the roles
    the approval's own decision named (they are sent its page). The requester sees their own
    through the API; listing every approval takes a role of the data's ``approvers``."""
    data = runtime.policy_data
    if data.may_list_approvals(principal):
        return True
    named = approval.approver_roles
    return named is not None and not set(named).isdisjoint(data.roles(principal))


def risk_of(runtime: Runtime, approval: ApprovalRecord) -> str:
    """The risk of the approved call's tool version (``critical`` once it left the catalogue)."""
    for tool in runtime.catalogue.versions(approval.tool_name):
        if str(tool.version) == approval.tool_version:
            return tool.risk.value
    return "critical"  # the tool left the catalogue: only the strictest approvers decide


async def decide(
    runtime: Runtime,
    approval_id: str,
    approver: str,
    approve: bool,
    comment: str | None,
    resume: bool = True,
    edits: Mapping[str, JSON] | None = None,
) -> Verdict:
    """Approve or deny ``approval_id`` as ``approver``; ``edits`` (approve only) changes
    editable arguments first (``runtime/edits.py``: checked, or 422 with nothing changed)."""
    approval = await runtime.store.get_approval(approval_id)
    if approval is None:
        raise NotFound("no such approval")
    check_approver(runtime, approval, approver)
    edit = None
    if edits and approval.status == ApprovalStatus.PENDING:
        if not approve:
            raise MalformedRequest(
                "arguments are edited only to approve them; deny without arguments",
                code="invalid_request",
            )
        edit = await edits_of.check_edit(runtime, approval, approver, edits)
    decision = await runtime.store.decide_approval(
        approval_id, "approved" if approve else "denied", approver, comment, edit
    )
    if isinstance(decision, Refused):
        raise await _refusal(runtime, replace(approval, status=decision.status))
    decided = decision.approval
    if (metrics := runtime.telemetry.metrics) is not None:
        metrics.approval("approved" if approve else "denied")
    if not approve:
        why = f"denied by {approver}" + (f": {comment}" if comment else "")
        await close_parked(runtime, decided, PolicyDenied(why, code="approval_denied"))
        return Verdict(decided)
    if resume:
        return Verdict(decided, resume=True)
    token = tokens.sign(tokens.claims_for(decided), runtime.approval_key)
    await close_parked(runtime, decided, None, release_key=True)
    return Verdict(decided, token=token)


async def preview_edit(
    runtime: Runtime, approval_id: str, approver: str, edits: Mapping[str, JSON]
) -> ApprovalEdit | None:
    """What approving ``approval_id`` with ``edits`` would bind and show (its preview),
    checked as ``decide`` checks it, deciding nothing; None when ``edits`` changes nothing."""
    approval = await runtime.store.get_approval(approval_id)
    if approval is None:
        raise NotFound("no such approval")
    check_approver(runtime, approval, approver)
    if approval.status != ApprovalStatus.PENDING:
        raise await _refusal(runtime, approval)
    return await edits_of.check_edit(runtime, approval, approver, edits)


REFUSALS: dict[str, str] = {
    ApprovalStatus.APPROVED: "it was already approved",
    ApprovalStatus.DENIED: "it was already denied",
    ApprovalStatus.USED: "it was approved and its call has run",
    ApprovalStatus.WITHDRAWN: "the call waiting for it was cancelled or has ended",
}
"""Why an approval that is not pending can no longer be decided (``expired``: below)."""


async def _refusal(runtime: Runtime, approval: ApprovalRecord) -> ToolgateError:
    """The answer to a decision on an approval that is no longer pending: 409
    ``approval_<status>`` (``not_found`` if it vanished)."""
    if approval.status == "not_found":
        return NotFound("no such approval")
    if approval.status == ApprovalStatus.EXPIRED:
        closed_with = await close_expired(runtime, approval)
        why = (
            "the call's deadline passed before anyone decided, and the approval expired with it"
            if closed_with is not None and closed_with.code == "deadline_exceeded"
            else "it expired before anyone decided"
        )
    else:
        why = REFUSALS.get(approval.status, approval.status)
    return Conflict(
        f"approval {approval.id} can no longer be decided: {why}",
        code=f"approval_{approval.status}",
        retryable=False,
    )


async def close_parked(
    runtime: Runtime,
    approval: ApprovalRecord,
    error: ToolgateError | None,
    release_key: bool = False,
) -> ExecutionRecord | None:
    """End the execution parked for ``approval``: failed with ``error``, or (no error)
    cancelled because the approval went to the agent as a token."""
    record = await runtime.store.get_execution(approval.execution_id)
    if record is None:
        return None
    return await _close(runtime, record, approval, error, release_key)


async def _close(
    runtime: Runtime,
    record: ExecutionRecord,
    approval: ApprovalRecord,
    error: ToolgateError | None,
    release_key: bool = False,
) -> ExecutionRecord:
    summary = (
        "nothing was attempted"
        if error
        else ("approved as a token: resubmit the call with approval_token")
    )
    resolved = {
        "approval_id": approval.id,
        "status": approval.status,
        "decided_by": approval.decided_by,
        "comment": approval.comment,
    }
    return await close_execution(
        runtime,
        record,
        Outcome.FAILED if error else Outcome.CANCELLED,
        error,
        SideEffectReport(False, False, summary),
        before=[("approval.resolved", resolved)],
        release_key=release_key,
    )


async def close_expired(runtime: Runtime, approval: ApprovalRecord) -> ToolgateError | None:
    """End the execution of an expired approval, failed; returns the error it ends with
    (None when the execution is gone). An approval expires at the call's deadline when that
    comes first (see ``expiry_error``)."""
    record = await runtime.store.get_execution(approval.execution_id)
    if record is None:
        return None
    error = expiry_error(record, approval)
    await _close(runtime, record, approval, error)
    return error


def expiry_error(record: ExecutionRecord, approval: ApprovalRecord) -> ToolgateError:
    """Why the call of an expired approval failed: its deadline passed (the approval's expiry
    is capped by it when it is requested), or nobody decided within ``approval_ttl``."""
    deadline_ms = json.loads(record.request_json).get("deadline_ms")
    if isinstance(deadline_ms, int) and deadline_ms <= approval.expires_ms:
        return ValidationError(
            "the call's deadline passed while it waited for approval; nothing was attempted "
            "(send it again with a later deadline)",
            code="deadline_exceeded",
        )
    return PolicyDenied(
        "the approval expired before anyone decided; request the call again",
        code="approval_expired",
    )


async def resume(runtime: Runtime, approval: ApprovalRecord) -> None:
    """Run the execution of an approved ``approval`` to its end (a door starts this in the
    background once ``decide`` says ``resume``); a failure is logged, and recovery or the
    sweep settles what it left.

    The execution counts as running here from the start (before the reads that precede its
    flow): this process's sweep (``recovery.unresumed``) starts no second resume meanwhile."""
    runtime.active.add(approval.execution_id)
    try:
        await resume_call(runtime, approval)
    except Exception:
        log.exception("resuming the execution of approval %s failed", approval.id)
    finally:
        runtime.active.discard(approval.execution_id)


async def sweep(runtime: Runtime) -> None:
    """Expire overdue approvals (failing their executions) and forget expired keys."""
    metrics = runtime.telemetry.metrics
    for approval in await runtime.store.expired_approvals():
        if metrics is not None:
            metrics.approval("expired")
        try:
            await close_expired(runtime, approval)
        except ToolgateError as exc:
            log.warning("could not close execution of expired approval %s: %s", approval.id, exc)
    await runtime.store.sweep_idempotency()
