"""HTTP handlers: parse at the edge, call the pipeline or the store, render."""

from __future__ import annotations

import time
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from gateway import jsonlimits
from gateway.declarations import definitions
from gateway.errors import (
    Forbidden,
    MalformedRequest,
    NotFound,
    PayloadTooLarge,
    ResolveError,
    UnsupportedMediaType,
)
from gateway.http import streams
from gateway.http.auth import identity_of
from gateway.http.auth import principal_of as principal_of
from gateway.observability.metrics import CONTENT_TYPE
from gateway.pipeline.plan import plan_call
from gateway.pipeline.records import ToolExecutionRequest
from gateway.pipeline.request import parse_request
from gateway.pipeline.runner import run_call
from gateway.policy import bundle as bundles
from gateway.runtime import admission, approvals, cancellation
from gateway.runtime.container import Runtime
from gateway.server import render
from gateway.store.records import ExecutionRecord
from gateway.types import ApprovalStatus, RemotePolicy, Status


def services_of(request: Request) -> Runtime:
    """The newest generation of the runtime (a call leases its own: ``Runtime.lease``)."""
    runtime: Runtime = request.app.state.services
    return runtime.latest


# A body this large is parsed and checked in a worker thread: on the event loop, parsing a
# megabyte of small values would hold up every other request for milliseconds.
OFF_LOOP_BYTES = 64 * 1024


async def read_json(
    request: Request,
    limit: int,
    *,
    optional: bool = False,
    limits: jsonlimits.JsonLimits | None = None,
) -> Any:
    """The request body as JSON, the same way on every route: read to its end whatever its
    framing (``Content-Length`` or chunked), refused when over ``limit`` bytes before it is
    parsed, then decoded and bounded (:func:`gateway.jsonlimits.decode`) by ``limits``
    (default: the settings'). With ``optional``, an empty body is ``None``."""
    heads = _Heads(request.scope)
    body = await _read_body(request, limit, heads)
    if optional and not body.strip():
        return None
    return (await _decoded(request, body, limits, heads)).value


class _Heads:
    """The headers the routes that read a body look at, found in one pass over the ASGI
    list (``Request.headers`` scans it again for each name, and raises and catches a
    KeyError for each one absent). The first of a repeated header counts, as in
    ``Headers.get``; every ``traceparent``, as in ``Headers.getlist``."""

    __slots__ = ("first", "traceparent")

    WANTED = frozenset((b"content-type", b"content-length", b"idempotency-key", b"prefer"))

    def __init__(self, scope: Scope) -> None:
        first: dict[bytes, str] = {}
        traceparent: list[str] = []
        for name, value in scope["headers"]:
            if name in self.WANTED:
                if name not in first:
                    first[name] = value.decode("latin-1")
            elif name == b"traceparent":
                traceparent.append(value.decode("latin-1"))
        self.first = first
        self.traceparent = traceparent


async def _decoded(
    request: Request, body: bytearray, limits: jsonlimits.JsonLimits | None, heads: _Heads
) -> jsonlimits.Checked:
    ctype = heads.first.get(b"content-type", "application/json").split(";")[0].strip()
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise UnsupportedMediaType(f"send Content-Type: application/json (got {ctype!r})")
    if limits is None:
        limits = services_of(request).settings.json_limits
    try:
        if len(body) > OFF_LOOP_BYTES:
            return await anyio.to_thread.run_sync(jsonlimits.decode_checked, body, limits)
        return jsonlimits.decode_checked(body, limits)
    except jsonlimits.JsonLimitError as exc:
        raise MalformedRequest(exc.message, code=exc.code) from exc


async def _read_body(request: Request, limit: int, heads: _Heads) -> bytearray:
    declared = heads.first.get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is larger than {limit} bytes")
    # ASGI's receive, read as Request.stream reads it, without its async generator
    receive, body = request.receive, bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.request":
            body += message.get("body", b"")
            if len(body) > limit:
                raise PayloadTooLarge(f"the body is larger than {limit} bytes")
            if not message.get("more_body", False):
                return body
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()


async def _execution_response(services: Runtime, record: ExecutionRecord) -> Response:
    approval = None
    if record.approval_id is not None:
        approval = await services.store.get_approval(record.approval_id)
    status = 200 if record.status is Status.COMPLETED else 202
    body = render.execution_json(record, approval)
    return render.EncodedJson(body, status)


async def _call_of(request: Request, services: Runtime, heads: _Heads) -> ToolExecutionRequest:
    """The call a ``POST /v1/executions`` or ``POST /v1/plans`` body asks for."""
    identity = identity_of(request)  # authenticated before the body is read
    settings = services.settings
    raw = await _read_body(request, settings.max_body_bytes, heads)
    checked = await _decoded(request, raw, settings.json_limits, heads)
    return parse_request(
        checked.value,
        identity.principal,
        heads.first.get(b"idempotency-key"),
        heads.traceparent,
        identity.roles,
        identity.method,
        checked=checked,
    )


async def create_execution(request: Request) -> Response:
    services = services_of(request)
    heads = _Heads(request.scope)
    call = await _call_of(request, services, heads)
    respond_async = "respond-async" in heads.first.get(b"prefer", "").lower()
    if respond_async:  # bounded by the queue; a worker holds the execution slot when it runs
        metrics = services.telemetry.metrics
        await admission.check_queued(services.store, services.settings, call.principal, metrics)
        record = await run_call(services, call, respond_async=True)
    else:
        with services.admission.executions.hold(call.principal):
            record = await run_call(services, call)
    return await _execution_response(services, record)


async def create_plan(request: Request) -> Response:
    """What ``POST /v1/executions`` with this body would do, with no side effect."""
    services = services_of(request)
    call = await _call_of(request, services, _Heads(request.scope))
    with services.admission.executions.hold(call.principal):
        plan = await plan_call(services, call)
    return JSONResponse(plan.to_json())


async def cancel_execution(request: Request) -> Response:
    services, record = await _visible_execution(request)
    record = await cancellation.cancel(services, record, principal_of(request))
    return await _execution_response(services, record)


async def cancel_by_token(request: Request) -> Response:
    """Cancel every unfinished execution of the caller carrying a cancellation_token."""
    services = services_of(request)
    principal = principal_of(request)
    data = await read_json(request, 16 * 1024)
    token = data.get("cancellation_token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        raise MalformedRequest('the body is {"cancellation_token": "..."}', code="invalid_request")
    records = await services.store.find_by_cancellation_token(principal, token)
    done = [await cancellation.cancel(services, r, principal) for r in records]
    items = [render.execution(r) for r in done]
    return JSONResponse({"items": items, "count": len(items)}, status_code=202 if items else 200)


async def resolve_execution(request: Request) -> Response:
    """A person (an approver) settles an ``unknown`` outcome."""
    services, record = await _visible_execution(request)
    principal = principal_of(request)
    _require_approver(services, principal)
    data = await read_json(request, 16 * 1024)
    if not isinstance(data, dict):
        raise MalformedRequest('the body is {"outcome": ..., "note": ...}', code="invalid_request")
    record = await cancellation.resolve_unknown(
        services, record, principal, str(data.get("outcome")), str(data.get("note") or "")
    )
    return await _execution_response(services, record)


async def _visible_execution(request: Request) -> tuple[Runtime, ExecutionRecord]:
    services = services_of(request)
    principal = principal_of(request)
    record = await services.store.get_execution(request.path_params["execution_id"])
    if record is None or not _may_see(services, principal, record):
        raise NotFound("no such execution")
    return services, record


def _may_see(services: Runtime, principal: str, record: ExecutionRecord) -> bool:
    """The caller's own executions; approvers (by policy data) see every execution."""
    return record.principal == principal or services.policy_data.may_list_approvals(principal)


MAX_WAIT_S = 60.0


async def get_execution(request: Request) -> Response:
    """One execution; ``?wait=S`` long-polls up to S seconds for a terminal state."""
    services, record = await _visible_execution(request)
    wait = _wait_seconds(request.query_params.get("wait"))
    if wait > 0 and not record.terminal:
        with services.admission.waiters.hold(principal_of(request)):
            record = await _wait_for_end(services, record, wait)
    return await _execution_response(services, record)


async def _wait_for_end(services: Runtime, record: ExecutionRecord, wait: float) -> ExecutionRecord:
    deadline = time.monotonic() + wait
    delay = 0.02
    while not record.terminal and time.monotonic() < deadline:
        await anyio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 1.5, 0.5)
        found = await services.store.get_execution(record.id)
        record = found or record
    return record


def _wait_seconds(raw: str | None) -> float:
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError as exc:
        raise MalformedRequest("wait must be a number of seconds", code="invalid_wait") from exc
    if not 0 <= wait <= MAX_WAIT_S:
        raise MalformedRequest(
            f"wait must be between 0 and {MAX_WAIT_S:g} seconds", code="invalid_wait"
        )
    return wait


async def list_executions(request: Request) -> Response:
    services = services_of(request)
    principal = principal_of(request)
    params = request.query_params
    records = await services.store.find_executions(
        principal, params.get("run_id"), params.get("call_id")
    )
    items = [render.execution(record) for record in records]
    return JSONResponse({"items": items, "count": len(items)})


async def execution_events(request: Request) -> Response:
    """The event log; ``?after=SEQ`` only the events with a ``seq`` greater than SEQ. With
    ``Accept: text/event-stream``, a live stream of them (``server/streams.py``)."""
    services, record = await _visible_execution(request)
    if streams.wants_stream(request):
        principal = principal_of(request)
        after = streams.execution_cursor(request.headers.get("last-event-id"))
        if request.query_params.get("after") is not None:
            after = max(after, streams.after_seq(request.query_params.get("after")))
        slots = services.admission.streams
        slots.take(principal)
        body = streams.execution_stream(services, record.id, after)
        return streams.respond(request, principal, body, slots)
    after = streams.after_seq(request.query_params.get("after"))
    events = await services.store.events(record.id, after)
    return JSONResponse({"execution_id": record.id, "items": [e.to_json() for e in events]})


async def run_events(request: Request) -> Response:
    """The events of a run's executions the caller may see; with ``Accept:
    text/event-stream``, a live stream of them."""
    services = services_of(request)
    principal = principal_of(request)
    run_id = request.path_params["run_id"]

    def visible(record: ExecutionRecord) -> bool:
        return _may_see(services, principal, record)

    if streams.wants_stream(request):
        cursor = streams.run_cursor(request.headers.get("last-event-id"))
        slots = services.admission.streams
        slots.take(principal)
        body = streams.run_stream(services, run_id, visible, cursor)
        return streams.respond(request, principal, body, slots)
    records = await services.store.find_executions(
        None, run_id, None, limit=streams.MAX_RUN_EXECUTIONS
    )
    items: list[dict[str, Any]] = []
    for record in sorted(filter(visible, records), key=lambda r: (r.created_ms, r.id)):
        items.extend(e.to_json() for e in await services.store.events(record.id))
    return JSONResponse({"run_id": run_id, "items": items})


async def list_tools(request: Request) -> Response:
    """The catalogue; ``?format=`` every enabled tool as an LLM tool definition instead."""
    services = services_of(request)
    principal_of(request)
    fmt = request.query_params.get("format")
    if fmt is not None:
        return _tool_definitions(services, fmt)
    catalogue = services.catalogue
    items = []
    for name in catalogue.names:
        versions = catalogue.versions(name)
        enabled = [v for v in versions if not v.disabled] or versions
        items.append(render.tool_summary(enabled[0], versions))
    return JSONResponse({"items": items, "count": len(items)})


def _tool_definitions(services: Runtime, fmt: str) -> Response:
    if fmt not in definitions.TOOL_FORMATS:
        raise MalformedRequest(
            f"format must be one of {', '.join(definitions.TOOL_FORMATS)} (got {fmt!r})",
            code="invalid_format",
        )
    catalogue = services.catalogue
    items, names = [], {}
    for name in catalogue.names:
        enabled = [v for v in catalogue.versions(name) if not v.disabled]
        if enabled:  # a tool whose every version is disabled cannot be called
            items.append(definitions.tool_definition(enabled[0], fmt))
            names[definitions.definition_name(enabled[0], fmt)] = name
    return JSONResponse({"format": fmt, "items": items, "count": len(items), "names": names})


async def get_tool(request: Request) -> Response:
    services = services_of(request)
    principal_of(request)
    name = request.path_params["name"]
    versions = services.catalogue.versions(name)
    if not versions:
        raise NotFound(f"no tool named {name!r}")
    try:
        tool = services.catalogue.resolve(name, request.query_params.get("version"))
    except ResolveError as exc:
        raise NotFound(exc.message, code=exc.code) from exc
    return JSONResponse(render.tool_detail(tool, versions))


APPROVAL_STATES = tuple(s.value for s in ApprovalStatus)


def _require_approver(services: Runtime, principal: str) -> None:
    if not services.policy_data.may_list_approvals(principal):
        raise Forbidden("only approvers may see and decide approvals", code="not_an_approver")


async def list_approvals(request: Request) -> Response:
    services = services_of(request)
    _require_approver(services, principal_of(request))
    status = request.query_params.get("status")
    if status is not None and status not in APPROVAL_STATES:
        raise MalformedRequest(
            f"status must be one of {', '.join(APPROVAL_STATES)}", code="invalid_status"
        )
    await approvals.sweep(services)
    items = await services.store.list_approvals(status)
    return JSONResponse({"items": [a.to_json() for a in items], "count": len(items)})


async def get_approval(request: Request) -> Response:
    services = services_of(request)
    principal = principal_of(request)
    approval = await services.store.get_approval(request.path_params["approval_id"])
    if approval is None or (
        approval.principal != principal and not approvals.may_see(services, approval, principal)
    ):
        raise NotFound("no such approval")
    return JSONResponse(approval.to_json())


_DECISION_KEYS = frozenset({"comment", "resume", "arguments"})
_DECISION_SHAPE = '{"comment": "...", "resume": true|false, "arguments": {...}}'


async def _decision_body(request: Request) -> dict[str, Any]:
    """The optional body of approve and deny: ``comment`` (string or null), ``resume``
    (boolean), and for approve ``arguments``, the edits of editable arguments (an object)."""
    data = await read_json(request, services_of(request).settings.max_body_bytes, optional=True)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MalformedRequest(f"the body is {_DECISION_SHAPE}", code="invalid_request")
    unknown = sorted(set(data) - _DECISION_KEYS)
    if unknown:
        raise MalformedRequest(
            f"unknown fields {unknown}: the body is {_DECISION_SHAPE}", code="invalid_request"
        )
    if (
        not isinstance(data.get("comment"), str | None)
        or not isinstance(data.get("resume", True), bool)
        or not isinstance(data.get("arguments", {}), dict)
    ):
        raise MalformedRequest(
            "comment is a string, resume a boolean and arguments an object",
            code="invalid_request",
        )
    return data


async def _decide(request: Request, approve: bool) -> Response:
    services = services_of(request)
    principal = principal_of(request)
    body = await _decision_body(request)
    verdict = await approvals.decide(
        services,
        request.path_params["approval_id"],
        principal,
        approve,
        body.get("comment"),
        resume=body.get("resume", True),
        edits=body.get("arguments"),
    )
    if verdict.resume:
        request.app.state.tasks.start_soon(approvals.resume, services, verdict.approval)
    out = verdict.approval.to_json()
    out["links"] = {"execution": f"/v1/executions/{verdict.approval.execution_id}"}
    if verdict.token is not None:
        out["approval_token"] = verdict.token
    return JSONResponse(out, status_code=202 if verdict.resume else 200)


async def approve(request: Request) -> Response:
    return await _decide(request, True)


async def deny(request: Request) -> Response:
    return await _decide(request, False)


async def policy_bundle(request: Request) -> Response:
    """The policy as an OPA bundle (docs/api.md), with an ETag; 304 when it is unchanged."""
    principal_of(request)
    services = services_of(request)
    of, built = getattr(request.app.state, "policy_bundle", (None, None))
    if built is None or of is not services.policy:  # built once per policy (a reload: again)
        built = bundles.served(services.policy, services.settings)
        request.app.state.policy_bundle = (services.policy, built)
    headers = {"ETag": built.etag, "Cache-Control": "no-cache"}
    if bundles.etag_matches(request.headers.get("if-none-match"), built.etag):
        return Response(status_code=304, headers=headers)
    return Response(built.data, media_type="application/gzip", headers=headers)


async def reload(request: Request) -> Response:
    """Reload tools.d, rego/ and policies/ (docs/api.md#post-v1adminreload): admins only."""
    principal = principal_of(request)
    if principal not in services_of(request).settings.admins:
        raise Forbidden(
            f"{principal} may not reload the gateway (only the principals listed in admins)",
            code="not_an_admin",
        )
    done = await request.app.state.reloader.reload(by=principal)
    return JSONResponse(done.to_json())


async def metrics(request: Request) -> Response:
    """The Prometheus text exposition (docs/operations.md#metrics)."""
    services = services_of(request)
    if not services.settings.metrics.open:
        principal_of(request)
    collected = services.telemetry.metrics
    if collected is None:
        raise NotFound("metrics are off (metrics: {enabled: false})")
    pending, queued = await services.store.gauges()
    body = collected.scrape(pending, queued, len(services.active))
    return Response(body, media_type=CONTENT_TYPE)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready while the store answers and the policy backend can decide (docs/api.md)."""
    services = services_of(request)
    store_ok = await services.store.ping()
    policy = services.policy
    policy_ok = not isinstance(policy, RemotePolicy) or await policy.available()
    ready = store_ok and policy_ok
    body = {
        "status": "ready" if ready else "not_ready",
        "store": "ok" if store_ok else "unavailable",
        "tools": len(services.catalogue),
        "policy": services.settings.policy_backend,
        "policy_backend": "ok" if policy_ok else "unavailable",
        "revisions": services.revisions.to_json(),
        "generation": services.generations.number,
    }
    return JSONResponse(body, status_code=200 if ready else 503)
