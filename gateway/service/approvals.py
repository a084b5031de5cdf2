"""Approvals as every door shows them: who sees one, the list an approver works from,
and a decision (``runtime/approvals.py`` decides; this is what the doors call).

One rule of visibility (REST, the page, and later the MCP door's links): the requester
sees their own approval, and so does every principal who may decide it
(``runtime.approvals.may_see``); anybody else is answered as if it did not exist.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from anyio.abc import TaskGroup

from gateway.errors import Forbidden, MalformedRequest, NotFound
from gateway.pipeline.policy import preview_failure
from gateway.runtime import approvals
from gateway.runtime.approvals import REFUSALS, Verdict, preview_edit, risk_of
from gateway.runtime.container import Runtime
from gateway.service import executions
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import JSON, ApprovalStatus

__all__ = [
    "COMMENT_LIMIT",
    "REFUSALS",
    "Verdict",
    "decide",
    "listing",
    "may_decide",
    "page_path",
    "preview_edit",
    "preview_failure",
    "risk_of",
    "view",
    "visible",
]


def page_path(approval_id: str) -> str:
    """Where a person decides ``approval_id`` (``gateway/ui/routes.py``): every door's
    answer about a parked call names it (REST as this path, MCP with its base URL)."""
    return f"/ui/approvals/{approval_id}"


def require_approver(services: Runtime, principal: str, message: str) -> None:
    """Forbidden (``not_an_approver``, ``message``) unless ``principal`` may list approvals."""
    if not services.policy_data.may_list_approvals(principal):
        raise Forbidden(message, code="not_an_approver")


LIST_LIMIT = 100
"""The most approvals one listing answers (the newest)."""


async def listing(
    services: Runtime,
    principal: str,
    status: str | None,
    message: str,
    *,
    run_id: str | None = None,
    call_id: str | None = None,
) -> list[ApprovalRecord]:
    """Every approval in ``status`` (None: any), expired ones closed first, newest first (at
    most ``LIST_LIMIT``); for approvers only (``message`` says so to anybody else).

    Given ``run_id`` or ``call_id``, the approvals of the calls they name that
    ``principal`` may see (``may_see``: the requester, and whoever may decide): how an agent
    whose call was parked, knowing only its run and call ids, finds its approval."""
    if run_id is None and call_id is None:
        require_approver(services, principal, message)
    await approvals.sweep(services)
    everyone = services.policy_data.may_list_approvals(principal)
    found = await services.store.list_approvals(
        status,
        LIST_LIMIT,
        run_id=run_id,
        call_id=call_id,
        seen_by=None if everyone else principal,
    )
    return [approval for approval in found if may_see(services, principal, approval)]


def may_see(services: Runtime, principal: str, approval: ApprovalRecord) -> bool:
    return approval.principal == principal or approvals.may_see(services, approval, principal)


async def visible(services: Runtime, principal: str, approval_id: str) -> ApprovalRecord:
    """Approval ``approval_id``, or ``NotFound`` when ``principal`` may not see it."""
    approval = await services.store.get_approval(approval_id) if approval_id.isascii() else None
    if approval is None or not may_see(services, principal, approval):
        raise NotFound("no such approval")
    return approval


def may_decide(services: Runtime, approval: ApprovalRecord, principal: str) -> str | None:
    """None when ``principal`` may decide ``approval``; else why not."""
    try:
        approvals.check_approver(services, approval, principal)
    except Forbidden as exc:
        return exc.message
    return None


async def execution_of(services: Runtime, approval: ApprovalRecord) -> ExecutionRecord | None:
    return await services.store.get_execution(approval.execution_id)


async def latest(services: Runtime, approval: ApprovalRecord) -> ApprovalRecord:
    """``approval`` as the store holds it now."""
    return await services.store.get_approval(approval.id) or approval


async def view(
    services: Runtime, approval: ApprovalRecord
) -> tuple[ApprovalRecord, ExecutionRecord | None, executions.EventPage]:
    """What a person deciding ``approval`` is shown: the approval (closed first if it has
    expired), its execution and the first page of that execution's events."""
    if approval.status == ApprovalStatus.PENDING and approval.expires_ms <= now_ms():
        await approvals.sweep(services)
        approval = await latest(services, approval)
    record = await execution_of(services, approval)
    events = (
        await executions.events(services, record) if record else executions.EventPage([], False)
    )
    return approval, record, events


def now_ms() -> int:
    return int(time.time() * 1000)


COMMENT_LIMIT = 2000
"""The most characters a decision's comment holds, whichever door sends it."""


def comment_of(comment: str | None) -> str | None:
    """A decision's comment as it is recorded: trimmed, None when nothing is left; over
    ``COMMENT_LIMIT`` characters it is refused (400 ``invalid_comment``)."""
    comment = (comment or "").strip()
    if len(comment) > COMMENT_LIMIT:
        raise MalformedRequest(
            f"a comment is at most {COMMENT_LIMIT} characters", code="invalid_comment"
        )
    return comment or None


async def decide(
    services: Runtime,
    tasks: TaskGroup,
    approval_id: str,
    principal: str,
    approve: bool,
    comment: str | None,
    *,
    resume: bool = True,
    edits: Mapping[str, JSON] | None = None,
) -> Verdict:
    """Approve or deny as ``principal`` with ``comment`` (``comment_of``: the same rule at
    every door); an approved call that resumes is run in ``tasks`` (the gateway's task
    group: the decision is answered without waiting for it)."""
    comment = comment_of(comment)
    verdict = await approvals.decide(
        services, approval_id, principal, approve, comment, resume=resume, edits=edits
    )
    if verdict.resume:
        tasks.start_soon(approvals.resume, services, verdict.approval)
    return verdict
