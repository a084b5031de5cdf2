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
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gateway.errors import (
    Forbidden,
    LimitExceeded,
    MalformedRequest,
    NotFound,
    ToolgateError,
    Unauthenticated,
)
from gateway.events.model import EVENT_TYPES, Event
from gateway.http import streams
from gateway.http.artifacts import artifact_response
from gateway.http.auth import Authenticator
from gateway.http.bodies import read_body
from gateway.runtime.container import Runtime
from gateway.service import executions as execution_service
from gateway.service import sessions as service_sessions
from gateway.store.records import ExecutionRecord
from gateway.types import Outcome, Status
from gateway.ui import session as sessions
from gateway.ui.session import Session

HERE = Path(__file__).resolve().parent
_TEMPLATES: list[Any] = []


def templates() -> Any:
    """The pages' jinja2 environment, made on the first page: jinja2 (~9 MB) is not loaded
    by a gateway whose page nobody opens."""
    if not _TEMPLATES:
        import jinja2

        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        env.filters["when"] = _when
        _TEMPLATES.append(env)
    return _TEMPLATES[0]


def _when(ms: int) -> str:
    """A time in milliseconds since the epoch, as UTC to the millisecond."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


FORM_LIMIT = 16 * 1024
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
    html = templates().get_template(name).render(request=request, now_ms=now_ms(), **context)
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


def now_ms() -> int:
    return int(time.time() * 1000)


def signed_in(handler: Handler) -> Handler:
    """Run ``handler`` for a signed-in principal (else to the sign-in page); a refusal
    becomes a page with its message."""

    async def wrapped(request: Request) -> Response:
        found = sessions.read(request.cookies.get(sessions.SESSION_COOKIE), _key(request))
        if found is None or not await _still_valid(request, found):
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


async def _still_valid(request: Request, session: Session) -> bool:
    """Whether the session was not signed out (on any replica: the store says) and the
    credential it was opened with is still accepted: an API key still configured for the
    principal, not expired, not revoked (a JWT session ends when the token does: its expiry
    bounds the session's)."""
    services = services_of(request)
    try:
        if await service_sessions.ended(services, session.id):
            return False
    except ToolgateError:  # the store cannot say: the session is not taken on trust
        return False
    if session.method == "jwt":
        return services.settings.jwt is not None
    authenticator = _authenticator(request)
    key = authenticator.key_of(session.principal, session.credential)
    if key is None:
        return False
    try:
        await authenticator.check_key(key, services_of(request).store)
    except ToolgateError:
        return False
    return True


def _authenticator(request: Request) -> Authenticator:
    found: Authenticator = request.app.state.authenticator
    return found


async def _answered(handler: Handler, request: Request) -> Response:
    try:
        return await handler(request)
    except ToolgateError as exc:
        status = exc.http_status if 400 <= exc.http_status < 500 else 503
        answer = page(
            "message.html",
            request,
            status,
            title=_TITLES.get(status, "Not possible"),
            message=exc.message,
            code=exc.code,
        )
        if isinstance(exc, LimitExceeded):
            answer.headers["Retry-After"] = str(exc.retry_after)
        return answer


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
    declared = request.headers.get("content-length")
    body = await read_body(request.receive, FORM_LIMIT, declared, what="form")
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
        jwt=services_of(request).settings.jwt is not None,
    )
    response.set_cookie(sessions.SIGNIN_COOKIE, token, max_age=3600, **_cookie_flags(request))
    return response


def _cookie_flags(request: Request) -> dict[str, Any]:
    """The attributes of the page's cookies, the same where one is set and where it is
    deleted (a browser drops a cookie only for the path and flags it was set with)."""
    secure = request.url.scheme == "https"
    return {"path": "/ui/", "httponly": True, "samesite": "strict", "secure": secure}


async def signin(request: Request) -> Response:
    try:
        form = await read_form(request)
    except ToolgateError as exc:  # 400 not a form, 413 too large
        return await signin_form(request, exc.message, exc.http_status)
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
    services = services_of(request)
    settings = services.settings
    try:
        identity = await _authenticator(request).credential(
            form.get("api_key", "").strip(), services.store
        )
    except Unauthenticated as exc:
        return await signin_form(request, _signin_refusal(exc), 401)
    _, cookie = sessions.issue(
        identity.principal,
        settings.ui_session_ttl,
        _key(request),
        identity.method,
        identity.credential_id,
        identity.expires_ms,
    )
    response = RedirectResponse(_safe_next(form.get("next")), 303)
    response.set_cookie(
        sessions.SESSION_COOKIE,
        cookie,
        max_age=int(settings.ui_session_ttl),
        **_cookie_flags(request),
    )
    response.delete_cookie(sessions.SIGNIN_COOKIE, path="/ui/")
    return response


def _signin_refusal(exc: Unauthenticated) -> str:
    if exc.code == "invalid_api_key":
        return "That API key is not valid."
    return exc.message[:1].upper() + exc.message[1:] + "."


@signed_in
async def signout(request: Request) -> Response:
    """End the session for every copy of its cookie, on every replica (the store holds that
    it ended), then drop this browser's copy."""
    check_csrf(request, await read_form(request))
    session = session_of(request)
    await service_sessions.end(services_of(request), session.id, session.expires_ms)
    response = RedirectResponse("/ui/signin", 303)
    response.delete_cookie(sessions.SESSION_COOKIE, **_cookie_flags(request))
    return response


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


# --- executions -----------------------------------------------------------------------------

EXECUTION_STATUSES = tuple(s.value for s in Status)
OUTCOMES = tuple(o.value for o in Outcome)


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
    records = await execution_service.browse(
        services, principal, filters["run_id"] or None, LIST_LIMIT
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
    record = await execution_service.find_visible(
        services, principal, request.path_params["execution_id"]
    )
    if record is None:
        raise NotFound("There is no such execution.")
    return services, record


@signed_in
async def execution_page(request: Request) -> Response:
    services, record = await _visible(request)
    events, more = await execution_service.events(services, record)
    result = record.result
    return page(
        "execution.html",
        request,
        record=record,
        events=events,
        result=pretty(result) if result is not None else None,
        artifacts=sorted(set(_artifact_ids(result))),
        event_names=",".join(EVENT_TYPES),
        last_seq=events[-1].seq if events else -1,
        live_now=more or not streams.settled(record),  # the live timeline brings the rest
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
    slots = services.admission.streams
    slots.take(principal)
    row = templates().get_template("_event.html")

    def render(event: Event) -> str:
        return " ".join(row.render(event=event).split("\n"))

    async def body() -> AsyncIterator[str]:
        async for chunk in streams.execution_stream(services, record.id, after, render):
            yield chunk
        if streams.settled(await execution_service.latest(services, record)):
            yield "event: done\ndata: done\n\n"  # else the stream's time ran out: reconnect

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
