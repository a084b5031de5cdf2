"""The page's approval handlers: the inbox, an approval, and its decision (approve, deny, or
edit then approve: ``gateway/ui/edits.py``)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.errors import Forbidden, MalformedRequest, NotFound, ToolgateError
from gateway.events.model import EVENT_TYPES
from gateway.pipeline.policy import preview_failure
from gateway.runtime import approvals
from gateway.runtime.container import Runtime
from gateway.store.records import ApprovalEdit, ApprovalRecord, ExecutionRecord
from gateway.types import ApprovalStatus
from gateway.ui import edits as edit_form
from gateway.ui.pages import (
    COMMENT_LIMIT,
    check_csrf,
    now_ms,
    page,
    pretty,
    read_form,
    services_of,
    session_of,
    signed_in,
)

STATUSES = tuple(s.value for s in ApprovalStatus)


def _require_approver(services: Runtime, principal: str) -> None:
    if not services.policy_data.may_list_approvals(principal):
        raise Forbidden(
            "Only approvers see the approvals inbox; your key is an agent's.",
            code="not_an_approver",
        )


def _may_decide(services: Runtime, approval: ApprovalRecord, principal: str) -> str | None:
    """None when ``principal`` may decide ``approval``; else why not."""
    try:
        approvals.check_approver(services, approval, principal)
    except Forbidden as exc:
        return exc.message
    return None


@signed_in
async def inbox(request: Request) -> Response:
    services = services_of(request)
    principal = session_of(request).principal
    _require_approver(services, principal)
    status = request.query_params.get("status", "pending")
    if status not in (*STATUSES, "all"):
        raise MalformedRequest(
            f"status is one of {', '.join(STATUSES)} or all", code="invalid_status"
        )
    await approvals.sweep(services)
    found = await services.store.list_approvals(None if status == "all" else status)
    rows = []
    for approval in sorted(found, key=lambda a: a.requested_ms, reverse=True):
        why_not = _may_decide(services, approval, principal)
        if status == "pending" and why_not is not None:
            continue  # the inbox: what this principal may decide
        record = await services.store.get_execution(approval.execution_id)
        rows.append(
            {
                "approval": approval,
                "risk": approvals.risk_of(services, approval),
                "agent": record.agent_id if record else None,
                "why_not": why_not,
            }
        )
    return page("inbox.html", request, rows=rows, selected=status, statuses=STATUSES)


async def _approval_view(request: Request) -> tuple[Runtime, ApprovalRecord, str]:
    services = services_of(request)
    principal = session_of(request).principal
    approval = await services.store.get_approval(request.path_params["approval_id"])
    if approval is None or not approvals.may_see(services, approval, principal):
        _require_approver(services, principal)  # an agent's key: said so, as on the inbox
        raise NotFound("There is no such approval.")
    return services, approval, principal


@signed_in
async def approval_page(request: Request) -> Response:
    services, approval, principal = await _approval_view(request)
    return await _render_approval(request, services, approval, principal)


async def _render_approval(
    request: Request,
    services: Runtime,
    approval: ApprovalRecord,
    principal: str,
    notice: str | None = None,
    status: int = 200,
    sent: dict[str, str] | None = None,
    edited: ApprovalEdit | None = None,
) -> Response:
    if approval.status == ApprovalStatus.PENDING and approval.expires_ms <= now_ms():
        await approvals.sweep(services)
        approval = await services.store.get_approval(approval.id) or approval
    record = await services.store.get_execution(approval.execution_id)
    events = await services.store.events(approval.execution_id) if record else []
    guards = _guards(services, approval, record)
    return page(
        "approval.html",
        request,
        status,
        approval=approval,
        record=record,
        risk=approvals.risk_of(services, approval),
        why_not=_may_decide(services, approval, principal),
        arguments=pretty(approval.arguments),
        preview=_preview(edited.preview if edited is not None else approval.preview),
        edited=edited,
        edited_arguments=pretty(edited.arguments) if edited is not None else None,
        guards=guards,
        events=events,
        event_names=",".join(EVENT_TYPES),
        last_seq=events[-1].seq if events else -1,
        notice=notice,
        refusal=_closed(approval),
        editable=_edit_fields(services, approval, sent),
        edit_comment=(sent or {}).get("comment", ""),
    )


def _edit_fields(
    services: Runtime, approval: ApprovalRecord, sent: dict[str, str] | None = None
) -> list[edit_form.EditField]:
    """The edit form's fields: the arguments the approval's tool lets an approver change."""
    for tool in services.catalogue.versions(approval.tool_name):
        if str(tool.version) == approval.tool_version:
            return edit_form.fields(tool.approval.editable, tool.input, approval, sent)
    return []


def _closed(approval: ApprovalRecord) -> str | None:
    if approval.status == ApprovalStatus.PENDING:
        return None
    if approval.status == ApprovalStatus.EXPIRED:
        return "This approval expired before anyone decided; it can no longer be decided."
    why = approvals.REFUSALS.get(approval.status, approval.status)
    return f"This approval can no longer be decided: {why}."


def _guards(
    services: Runtime, approval: ApprovalRecord, record: ExecutionRecord | None
) -> list[dict[str, Any]]:
    expected: dict[str, Any] = {}
    if record is not None:
        sent = json.loads(record.request_json).get("expected_state")
        expected = sent if isinstance(sent, dict) else {}
    out = []
    for tool in services.catalogue.versions(approval.tool_name):
        if str(tool.version) == approval.tool_version:
            for guard in tool.state_guards:
                out.append(
                    {
                        "name": guard.expected,
                        "probe": guard.actual,
                        "expected": expected.get(guard.expected),
                    }
                )
    return out


def _preview(preview: Any) -> dict[str, Any]:
    """The preview split into its diff (as typed lines) and the rest (as JSON), or why the
    adapter could not make one (``failed``: the page warns beside Approve)."""
    failed = preview_failure(preview)
    if failed is not None:
        return {"diff": [], "rest": None, "failed": failed}
    diff: list[tuple[str, str]] = []
    rest = preview
    if isinstance(preview, dict) and isinstance(preview.get("diff"), str):
        rest = {k: v for k, v in preview.items() if k != "diff"}
        for line in preview["diff"].splitlines():
            kind = (
                "hunk"
                if line.startswith("@@")
                else "file"
                if line.startswith(("+++", "---"))
                else "add"
                if line.startswith("+")
                else "del"
                if line.startswith("-")
                else "ctx"
            )
            diff.append((kind, line))
    return {"diff": diff, "rest": pretty(rest) if rest not in (None, {}) else None, "failed": None}


@signed_in
async def decide(request: Request) -> Response:
    services, approval, principal = await _approval_view(request)
    form = await read_form(request)
    check_csrf(request, form)
    decision = form.get("decision")
    if decision not in ("approve", "deny", "edit", "preview"):
        raise MalformedRequest("choose approve or deny", code="invalid_decision")
    comment = form.get("comment", "").strip()
    if len(comment) > COMMENT_LIMIT:
        raise MalformedRequest(
            f"a comment is at most {COMMENT_LIMIT} characters", code="invalid_comment"
        )
    edit = decision in ("edit", "preview")
    try:
        edits = edit_form.read(form, _edit_fields(services, approval)) if edit else None
        if decision == "preview":
            return await _preview_edit(request, services, approval, principal, form, edits or {})
        verdict = await approvals.decide(
            services, approval.id, principal, decision != "deny", comment or None, edits=edits
        )
    except ToolgateError as exc:
        if exc.http_status not in (403, 409, 422) and not (edit and exc.http_status == 400):
            raise
        fresh = await services.store.get_approval(approval.id) or approval
        return await _render_approval(
            request,
            services,
            fresh,
            principal,
            notice=exc.message,
            status=exc.http_status,
            sent=form if edit else None,
        )
    if verdict.resume:
        request.app.state.tasks.start_soon(approvals.resume, services, verdict.approval)
    return RedirectResponse(f"/ui/approvals/{approval.id}", 303)


async def _preview_edit(
    request: Request,
    services: Runtime,
    approval: ApprovalRecord,
    principal: str,
    form: dict[str, str],
    edits: dict[str, Any],
) -> Response:
    """The approval's page with the edited call's arguments and preview; nothing decided."""
    checked = await approvals.preview_edit(services, approval.id, principal, edits)
    notice = (
        "Nothing is edited: the fields hold the call's own arguments."
        if checked is None
        else "Below is the edited call's preview; nothing is decided until you approve it."
    )
    return await _render_approval(
        request, services, approval, principal, notice=notice, sent=form, edited=checked
    )
