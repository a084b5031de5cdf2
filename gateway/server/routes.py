"""HTTP handlers: parse at the edge, call the pipeline or the store, render."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import Forbidden, MalformedRequest, NotFound, PayloadTooLarge, ResolveError
from gateway.pipeline.request import parse_request
from gateway.pipeline.runner import run_call
from gateway.pipeline.services import Services
from gateway.server import render
from gateway.server.auth import authenticate
from gateway.store.records import ExecutionRecord
from gateway.types import Status

APPROVER_ROLE = "approver"


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def principal_of(request: Request) -> str:
    return authenticate(request, services_of(request).settings)


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON, refusing oversize bodies before parsing them."""
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise MalformedRequest(
            f"send Content-Type: application/json (got {ctype!r})", code="unsupported_media_type"
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is larger than {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"the body is larger than {limit} bytes")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedRequest(f"the body is not valid JSON: {exc}", code="malformed_json") from exc


async def _execution_response(services: Services, record: ExecutionRecord) -> JSONResponse:
    approval = None
    if record.approval_id is not None:
        approval = await services.store.get_approval(record.approval_id)
    status = 200 if record.status is Status.COMPLETED else 202
    return JSONResponse(render.execution(record, approval), status_code=status)


async def create_execution(request: Request) -> Response:
    services = services_of(request)
    principal = principal_of(request)
    body = await read_json(request, services.settings.max_body_bytes)
    call = parse_request(body, principal, request.headers.get("idempotency-key"))
    record = await run_call(services, call)
    return await _execution_response(services, record)


async def _visible_execution(request: Request) -> tuple[Services, ExecutionRecord]:
    services = services_of(request)
    principal = principal_of(request)
    record = await services.store.get_execution(request.path_params["execution_id"])
    if record is None or not _may_see(services, principal, record):
        raise NotFound("no such execution")
    return services, record


def _may_see(services: Services, principal: str, record: ExecutionRecord) -> bool:
    return record.principal == principal or APPROVER_ROLE in services.roles(principal)


async def get_execution(request: Request) -> Response:
    services, record = await _visible_execution(request)
    return await _execution_response(services, record)


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
    services, record = await _visible_execution(request)
    events = await services.store.events(record.id)
    return JSONResponse({"execution_id": record.id, "items": [e.to_json() for e in events]})


async def list_tools(request: Request) -> Response:
    services = services_of(request)
    principal_of(request)
    catalogue = services.catalogue
    items = []
    for name in catalogue.names:
        versions = catalogue.versions(name)
        enabled = [v for v in versions if not v.disabled] or versions
        items.append(render.tool_summary(enabled[0], versions))
    return JSONResponse({"items": items, "count": len(items)})


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


async def list_approvals(request: Request) -> Response:
    services = services_of(request)
    principal = principal_of(request)
    if APPROVER_ROLE not in services.roles(principal):
        raise Forbidden("only approvers may list approvals", code="not_an_approver")
    status = request.query_params.get("status")
    approvals = await services.store.list_approvals(status)
    return JSONResponse({"items": [a.to_json() for a in approvals], "count": len(approvals)})


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    services = services_of(request)
    store_ok = await services.store.ping()
    body = {
        "status": "ready" if store_ok else "not_ready",
        "store": "ok" if store_ok else "unavailable",
        "tools": len(services.catalogue),
        "policy": services.settings.policy_backend,
    }
    return JSONResponse(body, status_code=200 if store_ok else 503)
