"""The page's approval handlers: the inbox, an approval, and its decision (approve, deny, or
edit then approve: ``gateway/ui/edits.py``)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.errors import MalformedRequest, NotFound, ToolgateError
from gateway.events.model import EVENT_TYPES
from gateway.http import streams
from gateway.runtime.container import Runtime
from gateway.service import approvals as service_approvals
from gateway.store.records import ApprovalEdit, ApprovalRecord, ExecutionRecord
from gateway.types import ApprovalStatus
from gateway.ui import edits as edit_form
from gateway.ui.pages import (
    check_csrf,
    page,
    pretty,
    read_form,
    services_of,
    session_of,
    signed_in,
)

STATUSES = tuple(s.value for s in ApprovalStatus)


APPROVERS_ONLY = "Only approvers see the approvals inbox; your key is an agent's."


@signed_in
async def inbox(request: Request) -> Response:
    services = services_of(request)
    principal = session_of(request).principal
    status = request.query_params.get("status", "pending")
    service_approvals.require_approver(services, principal, APPROVERS_ONLY)
    if status not in (*STATUSES, "all"):
        raise MalformedRequest(
            f"status is one of {', '.join(STATUSES)} or all", code="invalid_status"
        )
    found = await service_approvals.listing(
        services, principal, None if status == "all" else status, APPROVERS_ONLY
    )
    rows = []
    for approval in sorted(found, key=lambda a: a.requested_ms, reverse=True):
        why_not = service_approvals.may_decide(services, approval, principal)
        if status == "pending" and why_not is not None:
            continue  # the inbox: what this principal may decide
        record = await service_approvals.execution_of(services, approval)
        rows.append(
            {
                "approval": approval,
                "risk": service_approvals.risk_of(services, approval),
                "agent": record.agent_id if record else None,
                "why_not": why_not,
            }
        )
    return page("inbox.html", request, rows=rows, selected=status, statuses=STATUSES)


async def _approval_view(request: Request) -> tuple[Runtime, ApprovalRecord, str]:
    """The approval the path names, as the signed-in principal may see it (the requester, and
    whoever may decide it: ``service.approvals.visible``)."""
    services = services_of(request)
    principal = session_of(request).principal
    try:
        approval = await service_approvals.visible(
            services, principal, request.path_params["approval_id"]
        )
    except NotFound:
        raise NotFound("There is no such approval.") from None
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
    approval, record, (events, more) = await service_approvals.view(services, approval)
    guards = _guards(services, approval, record)
    return page(
        "approval.html",
        request,
        status,
        approval=approval,
        record=record,
        risk=service_approvals.risk_of(services, approval),
        why_not=service_approvals.may_decide(services, approval, principal),
        arguments=pretty(approval.arguments),
        preview=_preview(edited.preview if edited is not None else approval.preview),
        edited=edited,
        edited_arguments=pretty(edited.arguments) if edited is not None else None,
        guards=guards,
        events=events,
        event_names=",".join(EVENT_TYPES),
        last_seq=events[-1].seq if events else -1,
        live_now=record is not None and (more or not streams.settled(record)),
        notice=notice,
        refusal=_closed(approval),
        editable=_edit_fields(services, approval, sent),
        edit_comment=(sent or {}).get("comment", ""),
        comment_limit=service_approvals.COMMENT_LIMIT,
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
    why = service_approvals.REFUSALS.get(approval.status, approval.status)
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
    failed = service_approvals.preview_failure(preview)
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
    edit = decision in ("edit", "preview")
    try:
        edits = edit_form.read(form, _edit_fields(services, approval)) if edit else None
        if decision == "preview":
            return await _preview_edit(request, services, approval, principal, form, edits or {})
        await service_approvals.decide(
            services,
            request.app.state.tasks,
            approval.id,
            principal,
            decision != "deny",
            form.get("comment"),
            edits=edits,
        )
    except ToolgateError as exc:
        if exc.http_status not in (403, 409, 422) and not (edit and exc.http_status == 400):
            raise
        fresh = await service_approvals.latest(services, approval)
        return await _render_approval(
            request,
            services,
            fresh,
            principal,
            notice=exc.message,
            status=exc.http_status,
            sent=form if edit else None,
        )
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
    checked = await service_approvals.preview_edit(services, approval.id, principal, edits)
    notice = (
        "Nothing is edited: the fields hold the call's own arguments."
        if checked is None
        else "Below is the edited call's preview; nothing is decided until you approve it."
    )
    return await _render_approval(
        request, services, approval, principal, notice=notice, sent=form, edited=checked
    )
