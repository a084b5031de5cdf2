"""HTTP handlers: parse at the edge, call the pipeline or the store, render."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway import jsonlimits
from gateway.declarations import definitions
from gateway.declarations.model import ToolDeclaration
from gateway.errors import (
    Forbidden,
    MalformedRequest,
    NotFound,
    ResolveError,
)
from gateway.http import streams
from gateway.http.auth import identity_of
from gateway.http.auth import principal_of as principal_of
from gateway.http.bodies import decode_json, read_body
from gateway.http.heads import Heads, Wanted
from gateway.observability.metrics import CONTENT_TYPE
from gateway.pipeline.records import ToolExecutionRequest
from gateway.pipeline.request import MAX_ID_LENGTH, is_id, parse_request
from gateway.policy import bundle as bundles
from gateway.runtime.container import Runtime
from gateway.server import render
from gateway.service import approvals as service_approvals
from gateway.service import calls, catalogue, executions, health
from gateway.store.records import ExecutionRecord
from gateway.types import ApprovalStatus, Status


def services_of(request: Request) -> Runtime:
    """The newest generation of the runtime (a call leases its own: ``Runtime.lease``)."""
    runtime: Runtime = request.app.state.services
    return runtime.latest


async def read_json(
    request: Request,
    limit: int,
    *,
    optional: bool = False,
    limits: jsonlimits.JsonLimits | None = None,
    measure: jsonlimits.Measure = jsonlimits.check,
) -> Any:
    """The request body as JSON, the same way on every route: read to its end whatever its
    framing (``Content-Length`` or chunked), refused when over ``limit`` bytes before it is
    parsed, then decoded and bounded (:func:`gateway.jsonlimits.decode`) by ``limits``
    (default: the settings'; checked by ``measure``). With ``optional``, an empty body is
    ``None``."""
    heads = Heads.of(request.scope["headers"], BODY_HEADERS)
    body = await read_body(request.receive, limit, heads.first.get("content-length"))
    if optional and not body.strip():
        return None
    if limits is None:
        limits = services_of(request).settings.json_limits
    return (await decode_json(body, heads.first.get("content-type"), limits, measure)).value


BODY_HEADERS = Wanted(
    ("content-type", "content-length", "idempotency-key", "prefer"), every=("traceparent",)
)
"""The headers the routes that read a body look at: the first of a repeated header counts,
as in ``Headers.get``; every ``traceparent``, as in ``Headers.getlist``."""


async def _execution_response(services: Runtime, record: ExecutionRecord) -> Response:
    approval = await executions.approval_of(services, record)
    status = 200 if record.status is Status.COMPLETED else 202
    body = render.execution_json(record, approval)
    return render.encoded_json(body, status)


async def _call_of(request: Request, services: Runtime, heads: Heads) -> ToolExecutionRequest:
    """The call a ``POST /v1/executions`` or ``POST /v1/plans`` body asks for."""
    identity = identity_of(request)  # authenticated before the body is read
    settings = services.settings
    first = heads.first
    raw = await read_body(request.receive, settings.max_body_bytes, first.get("content-length"))
    checked = await decode_json(
        raw, first.get("content-type"), settings.json_limits, jsonlimits.check_call
    )
    return parse_request(
        checked.value,
        identity.principal,
        first.get("idempotency-key"),
        heads.every.get("traceparent", ()),
        identity.roles,
        identity.method,
        body_bound=checked.bound,
    )


async def create_execution(request: Request) -> Response:
    services = services_of(request)
    heads = Heads.of(request.scope["headers"], BODY_HEADERS)
    call = await _call_of(request, services, heads)
    queued = "respond-async" in heads.first.get("prefer", "").lower()
    record = await calls.submit(services, call, queued=queued)
    return await _execution_response(services, record)


async def create_plan(request: Request) -> Response:
    """What ``POST /v1/executions`` with this body would do, with no side effect."""
    services = services_of(request)
    call = await _call_of(request, services, Heads.of(request.scope["headers"], BODY_HEADERS))
    plan = await calls.plan(services, call)
    return JSONResponse(plan.to_json())


async def cancel_execution(request: Request) -> Response:
    services, record = await _visible_execution(request)
    record = await calls.cancel(services, principal_of(request), record)
    return await _execution_response(services, record)


async def cancel_by_token(request: Request) -> Response:
    """Cancel every unfinished execution of the caller carrying a cancellation_token."""
    services = services_of(request)
    principal = principal_of(request)
    data = await read_json(request, 16 * 1024)
    token = data.get("cancellation_token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        raise MalformedRequest('the body is {"cancellation_token": "..."}', code="invalid_request")
    done = await calls.cancel_by_token(services, principal, token)
    items = [render.execution(r) for r in done]
    return JSONResponse({"items": items, "count": len(items)}, status_code=202 if items else 200)


async def resolve_execution(request: Request) -> Response:
    """A person (an approver) settles an ``unknown`` outcome."""
    services, record = await _visible_execution(request)
    principal = principal_of(request)
    data = await read_json(request, 16 * 1024)
    if not isinstance(data, dict):
        raise MalformedRequest('the body is {"outcome": ..., "note": ...}', code="invalid_request")
    record = await calls.resolve_unknown(
        services, principal, record, str(data.get("outcome")), str(data.get("note") or "")
    )
    return await _execution_response(services, record)


async def _visible_execution(request: Request) -> tuple[Runtime, ExecutionRecord]:
    services = services_of(request)
    record = await executions.visible(
        services, principal_of(request), request.path_params["execution_id"]
    )
    return services, record


async def get_execution(request: Request) -> Response:
    """One execution; ``?wait=S`` long-polls up to S seconds for a terminal state."""
    wait = executions.wait_seconds(_query(request, "wait").get("wait"))
    services, record = await _visible_execution(request)
    record = await executions.wait_for_end(services, principal_of(request), record, wait)
    return await _execution_response(services, record)


async def list_executions(request: Request) -> Response:
    """The caller's executions of a run (and call), each as ``GET /v1/executions/{id}``
    gives it."""
    run_id, call_id = _call_ids(_query(request, "run_id", "call_id"))
    found = await executions.find(services_of(request), principal_of(request), run_id, call_id)
    items = [render.execution(record, approval) for record, approval in found]
    return JSONResponse({"items": items, "count": len(items)})


async def execution_events(request: Request) -> Response:
    """The event log a page at a time; ``?after=SEQ`` only the events with a ``seq`` greater
    than SEQ (``next``: the page after). With ``Accept: text/event-stream``, a live stream of
    them (``http/streams.py``)."""
    sent = _query(request, "after").get("after")
    services, record = await _visible_execution(request)
    if streams.wants_stream(request):
        principal = principal_of(request)
        after = streams.execution_cursor(request.headers.get("last-event-id"))
        if sent is not None:
            after = max(after, streams.after_seq(sent))
        slots = services.admission.streams
        slots.take(principal)
        body = streams.execution_stream(services, record.id, after)
        return streams.respond(request, principal, body, slots)
    after = streams.after_seq(sent)
    page = await executions.events(services, record, after)
    return JSONResponse(render.execution_events(record.id, page.events, page.more))


async def run_events(request: Request) -> Response:
    """The events of a run's executions the caller may see, a page at a time (``?after=``:
    the page before's ``cursor``); with ``Accept: text/event-stream``, a live stream of them
    (``Last-Event-ID`` and ``?after=``: the later of the two)."""
    services = services_of(request)
    principal = principal_of(request)
    run_id = request.path_params["run_id"]
    after = streams.run_after(_query(request, "after").get("after"))
    if streams.wants_stream(request):
        cursor = streams.run_cursor(request.headers.get("last-event-id")).merge(after)
        slots = services.admission.streams
        slots.take(principal)
        body = streams.run_stream(services, principal, run_id, cursor)
        return streams.respond(request, principal, body, slots)
    page = await executions.run_events(services, principal, run_id, after.seqs)
    text = streams.Cursor(page.cursor).text() or None
    return JSONResponse(render.run_events(run_id, page.events, text, page.more))


async def _visible_tools(
    request: Request, query: QueryParams, only: str | None = None
) -> list[ToolDeclaration]:
    """The tools the caller may see for calls in ``?workspace=`` (default: the configured
    ``mcp.workspace``, as MCP ``tools/list``): the one listing of every door."""
    services = services_of(request)
    identity = identity_of(request)
    workspace = query.get("workspace", services.settings.mcp.workspace)
    return await catalogue.visible(
        services, identity.principal, workspace, identity.roles, identity.method, only
    )


async def list_tools(request: Request) -> Response:
    """The tools the caller may see; ``?format=`` as LLM tool definitions instead."""
    query = _query(request, "format", "workspace")
    fmt = query.get("format")
    if fmt is not None and fmt not in definitions.TOOL_FORMATS:
        raise MalformedRequest(
            f"format must be one of {', '.join(definitions.TOOL_FORMATS)} (got {fmt!r})",
            code="invalid_format",
        )
    tools = await _visible_tools(request, query)
    if fmt is None:
        catalogue = services_of(request).catalogue
        items = [render.tool_summary(tool, catalogue.versions(tool.name)) for tool in tools]
        return JSONResponse({"items": items, "count": len(items)})
    items = [definitions.tool_definition(tool, fmt) for tool in tools]
    names = {definitions.definition_name(tool, fmt): tool.name for tool in tools}
    return JSONResponse({"format": fmt, "items": items, "count": len(items), "names": names})


async def get_tool(request: Request) -> Response:
    """One tool the caller may see, with its schemas; ``?version=`` another of its versions."""
    services = services_of(request)
    query = _query(request, "version", "workspace")
    name = request.path_params["name"]
    if not await _visible_tools(request, query, only=name):
        raise NotFound(f"no tool named {name!r}")
    try:
        tool = services.catalogue.resolve(name, query.get("version"))
    except ResolveError as exc:
        raise NotFound(exc.message, code=exc.code) from exc
    return JSONResponse(render.tool_detail(tool, services.catalogue.versions(name)))


def _query(request: Request, *known: str) -> QueryParams:
    """The query parameters of every route that reads one, refused whole (400
    ``invalid_query``) when one is not among the route's ``known``: a misspelt filter
    (``?tool=``, ``?limit=``) must not be answered as if it were absent; or when one is given
    more than once: which of two values counts would be a guess."""
    params = request.query_params
    unknown = sorted(set(params) - set(known))
    if unknown:
        takes = ", ".join(known) or "none"
        raise MalformedRequest(
            f"unknown query parameter {unknown[0]!r} (this route takes: {takes})",
            code="invalid_query",
        )
    repeated = sorted(name for name in params if len(params.getlist(name)) > 1)
    if repeated:
        raise MalformedRequest(f"{repeated[0]} is given more than once", code="invalid_query")
    return params


def _call_ids(query: QueryParams) -> tuple[str | None, str | None]:
    """``?run_id=`` and ``?call_id=`` as a request body holds them (1 to ``MAX_ID_LENGTH``
    characters, no control character); else 400 ``invalid_query``: an id
    no call can have must not be answered as an empty list."""
    found: list[str | None] = []
    for name in ("run_id", "call_id"):
        value = query.get(name)  # once at most: _query
        if value is not None and not is_id(value):
            raise MalformedRequest(
                f"{name} is 1 to {MAX_ID_LENGTH} characters with no control character",
                code="invalid_query",
            )
        found.append(value)
    return found[0], found[1]


APPROVAL_STATES = tuple(s.value for s in ApprovalStatus)


APPROVERS_ONLY = "only approvers may see and decide approvals"


async def list_approvals(request: Request) -> Response:
    """Approvals: the inbox (approvers only), or by ``?run_id=`` / ``?call_id=`` those of a
    call the caller may see (``service/approvals.listing``)."""
    services = services_of(request)
    query = _query(request, "status", "run_id", "call_id")
    status = query.get("status")
    if status is not None and status not in APPROVAL_STATES:
        raise MalformedRequest(
            f"status must be one of {', '.join(APPROVAL_STATES)}", code="invalid_status"
        )
    run_id, call_id = _call_ids(query)
    items = await service_approvals.listing(
        services, principal_of(request), status, APPROVERS_ONLY, run_id=run_id, call_id=call_id
    )
    return JSONResponse({"items": [a.to_json() for a in items], "count": len(items)})


async def get_approval(request: Request) -> Response:
    approval = await service_approvals.visible(
        services_of(request), principal_of(request), request.path_params["approval_id"]
    )
    return JSONResponse(approval.to_json())


_DECISION_KEYS = frozenset({"comment", "resume", "arguments"})
_DECISION_SHAPE = '{"comment": "...", "resume": true|false, "arguments": {...}}'


async def _decision_body(request: Request) -> dict[str, Any]:
    """The optional body of approve and deny: ``comment`` (string or null), ``resume``
    (boolean), and for approve ``arguments``, the edits of editable arguments (an object)."""
    limit = services_of(request).settings.max_body_bytes
    data = await read_json(request, limit, optional=True, measure=jsonlimits.check_call)
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
    verdict = await service_approvals.decide(
        services,
        request.app.state.tasks,
        request.path_params["approval_id"],
        principal,
        approve,
        body.get("comment"),
        resume=body.get("resume", True),
        edits=body.get("arguments"),
    )
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
    pending, queued = await health.gauges(services)
    body = collected.scrape(pending, queued, len(services.active))
    return Response(body, media_type=CONTENT_TYPE)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready while the store answers and the policy backend can decide (docs/api.md)."""
    services = services_of(request)
    store_ok, policy_ok = await health.readiness(services)
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
