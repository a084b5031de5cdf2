"""The page's handlers: sign-in, the inbox, an approval, executions, the live timeline.

Every handler answers HTML: an error is a page with a clear message and its HTTP status,
never problem+json and never a stack trace. Every state-changing form carries the session's
CSRF token; a form without it changes nothing.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import anyio
import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gateway.errors import Forbidden, MalformedRequest, NotFound, PayloadTooLarge, ToolgateError
from gateway.events.model import EVENT_TYPES, Event
from gateway.http import streams
from gateway.http.artifacts import artifact_response
from gateway.runtime import approvals
from gateway.runtime.container import Runtime
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import ApprovalStatus, Outcome, Status
from gateway.ui import session as sessions
from gateway.ui.session import Session

HERE = Path(__file__).resolve().parent
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def _when(ms: int) -> str:
    """A time in milliseconds since the epoch, as UTC to the millisecond."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


TEMPLATES.filters["when"] = _when
FORM_LIMIT = 16 * 1024
COMMENT_LIMIT = 2000
LIST_LIMIT = 200
"""The newest executions the list reads before it filters by tool, outcome and status."""

Handler = Callable[[Request], Awaitable[Response]]


class CsrfRefused(Forbidden):
    code = "csrf_refused"


def services_of(request: Request) -> Runtime:
    """The newest generation of the runtime (a call leases its own: ``Runtime.lease``)."""
    runtime: Runtime = request.app.state.services
    return runtime.latest


def _key(request: Request) -> bytes:
    return sessions.session_key(services_of(request).approval_key)


def page(name: str, request: Request, status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("session", getattr(request.state, "session", None))
    html = TEMPLATES.get_template(name).render(request=request, now_ms=_now_ms(), **context)
    headers = {
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
            "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        "Referrer-Policy": "no-referrer",
    }
    return HTMLResponse(html, status_code=status, headers=headers)


def _now_ms() -> int:
    return int(time.time() * 1000)


def signed_in(handler: Handler) -> Handler:
    """Run ``handler`` for a signed-in principal (else to the sign-in page); a refusal
    becomes a page with its message."""

    async def wrapped(request: Request) -> Response:
        found = sessions.read(request.cookies.get(sessions.SESSION_COOKIE), _key(request))
        settings = services_of(request).settings
        if found is None or found.principal not in {p.id for p in settings.principals}:
            if request.method == "GET":
                return RedirectResponse("/ui/signin?" + urlencode({"next": request.url.path}), 303)
            return page(
                "message.html",
                request,
                401,
                title="Signed out",
                message="Your session has ended: sign in again.",
            )
        request.state.session = found
        return await _answered(handler, request)

    return wrapped


async def _answered(handler: Handler, request: Request) -> Response:
    try:
        return await handler(request)
    except ToolgateError as exc:
        status = exc.http_status if 400 <= exc.http_status < 500 else 503
        return page(
            "message.html",
            request,
            status,
            title=_TITLES.get(status, "Not possible"),
            message=exc.message,
            code=exc.code,
        )


_TITLES = {
    400: "Not understood",
    403: "Not allowed",
    404: "Not found",
    409: "Already decided",
    413: "Too large",
    429: "Too many",
    503: "Unavailable",
}


def session_of(request: Request) -> Session:
    found: Session = request.state.session
    return found


async def read_form(request: Request) -> dict[str, str]:
    """A urlencoded form, bounded; each field once (a repeated field is refused)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    if ctype != "application/x-www-form-urlencoded":
        raise MalformedRequest(
            "send the form as application/x-www-form-urlencoded", code="invalid_form"
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_LIMIT:
            raise PayloadTooLarge(f"the form is larger than {FORM_LIMIT} bytes")
    try:
        fields = parse_qs(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=20
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedRequest("the form could not be read", code="invalid_form") from exc
    if any(len(v) != 1 for v in fields.values()):
        raise MalformedRequest("a form field was sent twice", code="invalid_form")
    return {k: v[0] for k, v in fields.items()}


def check_csrf(request: Request, form: dict[str, str]) -> None:
    if not sessions.same_token(session_of(request).csrf, form.get("csrf")):
        raise CsrfRefused(
            "this form was not sent by this page (its security token is missing "
            "or wrong); nothing was changed: reload the page and try again"
        )


# --- sign-in --------------------------------------------------------------------------------


async def home(request: Request) -> Response:
    return RedirectResponse("/ui/approvals", 303)


def _safe_next(raw: str | None) -> str:
    if raw and raw.startswith("/ui/") and "//" not in raw and "\\" not in raw:
        return raw
    return "/ui/approvals"


async def signin_form(request: Request, error: str | None = None, status: int = 200) -> Response:
    token = request.cookies.get(sessions.SIGNIN_COOKIE) or ""
    if len(token) < 20 or len(token) > 64:
        token = sessions.secrets.token_urlsafe(24)
    response = page(
        "signin.html",
        request,
        status,
        session=None,
        csrf=token,
        error=error,
        next=_safe_next(request.query_params.get("next")),
    )
    response.set_cookie(
        sessions.SIGNIN_COOKIE,
        token,
        max_age=3600,
        path="/ui/",
        httponly=True,
        samesite="strict",
        secure=_https(request),
    )
    return response


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


async def signin(request: Request) -> Response:
    try:
        form = await read_form(request)
    except ToolgateError as exc:
        return await signin_form(request, exc.message, 400)
    if not sessions.same_token(request.cookies.get(sessions.SIGNIN_COOKIE, ""), form.get("csrf")):
        return page(
            "message.html",
            request,
            403,
            session=None,
            title="Not allowed",
            message="This sign-in form was not sent by this page (its security token is "
            "missing or wrong): reload the page and try again.",
            code="csrf_refused",
        )
    settings = services_of(request).settings
    principal = settings.principal_for_key(form.get("api_key", "").strip())
    if principal is None:
        return await signin_form(request, "That API key is not valid.", 401)
    _, cookie = sessions.issue(principal.id, settings.ui_session_ttl, _key(request))
    response = RedirectResponse(_safe_next(form.get("next")), 303)
    response.set_cookie(
        sessions.SESSION_COOKIE,
        cookie,
        max_age=int(settings.ui_session_ttl),
        path="/ui/",
        httponly=True,
        samesite="strict",
        secure=_https(request),
    )
    response.delete_cookie(sessions.SIGNIN_COOKIE, path="/ui/")
    return response


@signed_in
async def signout(request: Request) -> Response:
    check_csrf(request, await read_form(request))
    response = RedirectResponse("/ui/signin", 303)
    response.delete_cookie(
        sessions.SESSION_COOKIE,
        path="/ui/",
        httponly=True,
        samesite="strict",
        secure=_https(request),
    )
    return response


# --- approvals ------------------------------------------------------------------------------

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


def _risk(services: Runtime, approval: ApprovalRecord) -> str:
    for tool in services.catalogue.versions(approval.tool_name):
        if str(tool.version) == approval.tool_version:
            return tool.risk.value
    return "critical"


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
                "risk": _risk(services, approval),
                "agent": record.agent_id if record else "",
                "why_not": why_not,
            }
        )
    return page("inbox.html", request, rows=rows, selected=status, statuses=STATUSES)


async def _approval_view(request: Request) -> tuple[Runtime, ApprovalRecord, str]:
    services = services_of(request)
    principal = session_of(request).principal
    _require_approver(services, principal)
    approval = await services.store.get_approval(request.path_params["approval_id"])
    if approval is None:
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
) -> Response:
    if approval.status == ApprovalStatus.PENDING and approval.expires_ms <= _now_ms():
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
        risk=_risk(services, approval),
        why_not=_may_decide(services, approval, principal),
        arguments=_pretty(approval.arguments),
        preview=_preview(approval.preview),
        guards=guards,
        events=events,
        event_names=",".join(EVENT_TYPES),
        last_seq=events[-1].seq if events else -1,
        notice=notice,
        refusal=_closed(approval),
    )


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


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _preview(preview: Any) -> dict[str, Any]:
    """The preview split into its diff (as typed lines) and the rest (as JSON)."""
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
    return {"diff": diff, "rest": _pretty(rest) if rest not in (None, {}) else None}


@signed_in
async def decide(request: Request) -> Response:
    services, approval, principal = await _approval_view(request)
    form = await read_form(request)
    check_csrf(request, form)
    decision = form.get("decision")
    if decision not in ("approve", "deny"):
        raise MalformedRequest("choose approve or deny", code="invalid_decision")
    comment = form.get("comment", "").strip()
    if len(comment) > COMMENT_LIMIT:
        raise MalformedRequest(
            f"a comment is at most {COMMENT_LIMIT} characters", code="invalid_comment"
        )
    try:
        verdict = await approvals.decide(
            services, approval.id, principal, decision == "approve", comment or None
        )
    except ToolgateError as exc:
        if exc.http_status not in (403, 409):
            raise
        fresh = await services.store.get_approval(approval.id) or approval
        return await _render_approval(
            request, services, fresh, principal, notice=exc.message, status=exc.http_status
        )
    if verdict.resume:
        request.app.state.tasks.start_soon(approvals.resume, services, verdict.approval)
    return RedirectResponse(f"/ui/approvals/{approval.id}", 303)


# --- executions -----------------------------------------------------------------------------

EXECUTION_STATUSES = tuple(s.value for s in Status)
OUTCOMES = tuple(o.value for o in Outcome)


def _may_see(services: Runtime, principal: str, record: ExecutionRecord) -> bool:
    return record.principal == principal or services.policy_data.may_list_approvals(principal)


@signed_in
async def executions(request: Request) -> Response:
    services = services_of(request)
    principal = session_of(request).principal
    params = request.query_params
    filters = {k: params.get(k, "").strip() for k in ("run_id", "tool", "outcome", "status")}
    if filters["outcome"] and filters["outcome"] not in OUTCOMES:
        raise MalformedRequest(f"outcome is one of {', '.join(OUTCOMES)}", code="invalid_outcome")
    if filters["status"] and filters["status"] not in EXECUTION_STATUSES:
        raise MalformedRequest(
            f"status is one of {', '.join(EXECUTION_STATUSES)}", code="invalid_status"
        )
    everyone = services.policy_data.may_list_approvals(principal)
    records = await services.store.find_executions(
        None if everyone else principal, filters["run_id"] or None, None, limit=LIST_LIMIT
    )
    shown = [
        r
        for r in records
        if (not filters["tool"] or r.tool_name == filters["tool"])
        and (not filters["outcome"] or r.outcome == filters["outcome"])
        and (not filters["status"] or r.status.value == filters["status"])
    ]
    return page(
        "executions.html",
        request,
        records=shown,
        filters=filters,
        outcomes=OUTCOMES,
        statuses=EXECUTION_STATUSES,
        tools=services.catalogue.names,
    )


async def _visible(request: Request) -> tuple[Runtime, ExecutionRecord]:
    services = services_of(request)
    principal = session_of(request).principal
    record = await services.store.get_execution(request.path_params["execution_id"])
    if record is None or not _may_see(services, principal, record):
        raise NotFound("There is no such execution.")
    return services, record


@signed_in
async def execution_page(request: Request) -> Response:
    services, record = await _visible(request)
    events = await services.store.events(record.id)
    result = record.result
    return page(
        "execution.html",
        request,
        record=record,
        events=events,
        result=_pretty(result) if result is not None else None,
        artifacts=sorted(set(_artifact_ids(result))),
        event_names=",".join(EVENT_TYPES),
        last_seq=events[-1].seq if events else -1,
    )


def _artifact_ids(value: Any) -> list[str]:
    """The artifact ids a result links to (``/v1/artifacts/<id>``), for inline screenshots."""
    if isinstance(value, str):
        if value.startswith("/v1/artifacts/") and "/" not in value[len("/v1/artifacts/") :]:
            return [value[len("/v1/artifacts/") :]]
        return []
    if isinstance(value, dict):
        return [i for v in value.values() for i in _artifact_ids(v)]
    if isinstance(value, list):
        return [i for v in value for i in _artifact_ids(v)]
    return []


@signed_in
async def artifact(request: Request) -> Response:
    """An artifact for the page (the cookie's principal), as ``GET /v1/artifacts/{id}``."""
    principal = session_of(request).principal
    settings = services_of(request).settings
    artifact_id = request.path_params["artifact_id"]
    return await artifact_response(settings, artifact_id, principal, "There is no such artifact.")


@signed_in
async def timeline(request: Request) -> Response:
    """The live timeline of an execution: the event stream with each event as an HTML row,
    then ``done`` (the page closes the stream on it)."""
    services, record = await _visible(request)
    principal = session_of(request).principal
    after = streams.execution_cursor(
        request.headers.get("last-event-id") or request.query_params.get("after")
    )
    slots = streams.StreamSlots.of(request)
    slots.take(principal, services.settings.max_streams_per_principal)
    row = TEMPLATES.get_template("_event.html")

    def render(event: Event) -> str:
        return " ".join(row.render(event=event).split("\n"))

    async def body() -> AsyncIterator[str]:
        async for chunk in streams.execution_stream(services, record.id, after, render):
            yield chunk
        ended = await services.store.get_execution(record.id)
        if ended is None or ended.terminal:  # else the stream's time ran out: reconnect
            yield "event: done\ndata: done\n\n"

    return streams.respond(request, principal, body(), slots)


STATIC = {
    "htmx.min.js": "text/javascript",
    "htmx-ext-sse.min.js": "text/javascript",
    "ui.css": "text/css",
}


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return Response("not found", 404, media_type="text/plain")
    data = await anyio.Path(HERE / "static" / name).read_bytes()
    return Response(
        data,
        media_type=STATIC[name],
        headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
    )
