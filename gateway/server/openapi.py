"""The OpenAPI document of the REST door (``GET /openapi.json``), built from the same models
the code uses.

Every operation has a stable ``operationId`` (client generators and agent frameworks name
their functions after it: ``createExecution`` becomes ``create_execution``), a tag, the
parameters and headers it reads, and a typed response for each status it answers: the
resources of ``server/schemas.py``, every error as the one ``Problem`` (RFC 9457
``application/problem+json``, its ``code`` an open string), with the headers sent
(``Retry-After``, ``WWW-Authenticate``, ``ETag``). What every keyed request may meet whatever
its route is added to each operation here, once: 401 (no valid credential), 431 (headers over
``max_header_bytes``), 500, 503 (the store, the identity provider's keys, a total bound on
load), and 400, 413 and 415 for an operation that reads a JSON body.

Two doors of the app are not operations of this document (``UNDESCRIBED``): ``/mcp``, one
JSON-RPC endpoint whose operations are the methods in its body (docs/mcp.md), and ``/ui/``,
HTML pages for people.
"""

from __future__ import annotations

from typing import Any

from gateway import __version__
from gateway.declarations.definitions import TOOL_FORMATS
from gateway.pipeline.request import MAX_ID_LENGTH, ExecutionRequestBody
from gateway.server.schemas import Schema, ref, schemas
from gateway.types import ApprovalStatus

UNDESCRIBED = ("/mcp", "/ui/")
"""The prefixes of the routes that are no REST operation (``/mcp``; the pages, ``/ui/...``)."""

_PROBLEM_JSON = "application/problem+json"
_STR: Schema = {"type": "string"}
_CALL_ID: Schema = {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH}
"""A run or call id as a query parameter (as the request body takes it)."""


def _header(name: str) -> Schema:
    return {"$ref": f"#/components/headers/{name}"}


def _problem(description: str, *, retry_after: bool = False) -> Schema:
    out: Schema = {
        "description": description,
        "content": {_PROBLEM_JSON: {"schema": ref("Problem")}},
    }
    if retry_after:
        out["headers"] = {"Retry-After": _header("RetryAfter")}
    return out


def _json(description: str, schema: str | Schema, **headers: Schema) -> Schema:
    out: Schema = {
        "description": description,
        "content": {
            "application/json": {"schema": ref(schema) if isinstance(schema, str) else schema}
        },
    }
    if headers:
        out["headers"] = {name.replace("_", "-"): value for name, value in headers.items()}
    return out


def _shared(name: str) -> Schema:
    return {"$ref": f"#/components/responses/{name}"}


_RESPONSES: dict[str, Schema] = {
    "Unauthorized": {
        **_problem(
            "no valid credential (missing_api_key, bad_authorization, invalid_api_key, "
            "api_key_expired, api_key_revoked, invalid_token)"
        ),
        "headers": {"WWW-Authenticate": _header("WWWAuthenticate")},
    },
    "TooManyRequests": _problem(
        "the principal holds its share of a bound on load (too_many_*); nothing changed",
        retry_after=True,
    ),
    "HeadersTooLarge": _problem("the request's headers are over max_header_bytes"),
    "Internal": _problem("an unexpected failure (internal); see the gateway's log"),
    "Unavailable": _problem(
        "retryable: the store does not answer (store_unavailable), the identity provider's "
        "keys cannot be read (jwks_unavailable), everyone holds the total of a bound on load "
        "(overloaded), ...; retry after Retry-After",
        retry_after=True,
    ),
    "PayloadTooLarge": _problem("the body is over max_body_bytes (payload_too_large)"),
    "UnsupportedMediaType": _problem(
        "Content-Type is not application/json or *+json (unsupported_media_type)"
    ),
}
"""The responses many operations share, as ``components/responses``."""

_HEADERS: dict[str, Schema] = {
    "RetryAfter": {
        "description": "seconds to wait before sending the same request again",
        "schema": {"type": "integer", "minimum": 0},
    },
    "WWWAuthenticate": {
        "description": 'Bearer realm="toolgate"',
        "schema": {"type": "string"},
    },
    "ETag": {"description": "the entity tag of the body", "schema": {"type": "string"}},
    "CacheControl": {"schema": {"type": "string"}},
}

_PARAMETERS: dict[str, Schema] = {
    "ExecutionId": {"name": "execution_id", "in": "path", "required": True, "schema": _STR},
    "ApprovalId": {"name": "approval_id", "in": "path", "required": True, "schema": _STR},
    "IdempotencyKey": {
        "name": "Idempotency-Key",
        "in": "header",
        "description": "the idempotency key (docs/api.md#idempotency), or idempotency_key in "
        "the body; both must agree",
        "schema": _STR,
    },
    "Traceparent": {
        "name": "traceparent",
        "in": "header",
        "description": "W3C trace context; a malformed value is ignored",
        "schema": _STR,
    },
    "LastEventId": {
        "name": "Last-Event-ID",
        "in": "header",
        "description": "with Accept: text/event-stream, resume after this event: its seq "
        "(an execution's stream) or the run cursor, execution_id:seq pairs comma-separated "
        "(a run's stream); else 400 invalid_last_event_id",
        "schema": _STR,
    },
}


def _param(name: str) -> Schema:
    return {"$ref": f"#/components/parameters/{name}"}


def _query(name: str, description: str, schema: Schema) -> Schema:
    return {"name": name, "in": "query", "description": description, "schema": schema}


_WORKSPACE = _query(
    "workspace",
    "the workspace whose calls the listing is for (default: the configured mcp.workspace)",
    {"type": "string"},
)


_KEYED = {
    "401": _shared("Unauthorized"),
    "431": _shared("HeadersTooLarge"),
    "500": _shared("Internal"),
    "503": _shared("Unavailable"),
}
_PUBLIC = {"431": _shared("HeadersTooLarge"), "500": _shared("Internal")}
_WITH_BODY = {
    "400": _problem(
        "the body is not a JSON object of the documented shape (invalid_request, "
        "malformed_json, json_too_deep, json_too_many_values, malformed_request)"
    ),
    "413": _shared("PayloadTooLarge"),
    "415": _shared("UnsupportedMediaType"),
}


def _operation(
    operation_id: str,
    tag: str,
    summary: str,
    responses: dict[str, Schema],
    *,
    parameters: list[Schema] | None = None,
    body: Schema | None = None,
    security: list[dict[str, list[str]]] | None = None,
) -> Schema:
    """One operation, with the responses every request of its kind may meet (the module's
    docstring); an operation's own description of a status wins over the shared one."""
    shared = dict(_PUBLIC if security == [] else _KEYED)
    if body is not None:
        shared.update(_WITH_BODY)
    merged = {**shared, **responses}
    out: Schema = {"operationId": operation_id, "tags": [tag], "summary": summary}
    if security is not None:
        out["security"] = security
    if parameters:
        out["parameters"] = parameters
    if body is not None:
        out["requestBody"] = body
    out["responses"] = {status: merged[status] for status in sorted(merged)}
    return out


def _json_body(properties: Schema, *required: str, optional: bool = False) -> Schema:
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }
    return {"required": not optional, "content": {"application/json": {"schema": schema}}}


_EXECUTION_BODY = {
    "required": True,
    "content": {"application/json": {"schema": ref("ExecutionRequest")}},
}
"""The body of ``POST /v1/executions`` and ``POST /v1/plans``."""

_EVENTS_STREAM = {
    "schema": {
        "type": "string",
        "description": "Server-Sent Events (with Accept: text/event-stream): each message's "
        "id is the event's seq (a run: the run cursor), its event the type, its data the "
        "event as JSON",
    }
}
_BINARY = {"type": "string", "format": "binary"}

TAGS = [
    {"name": "executions", "description": "tool calls: run, read, follow, cancel, resolve"},
    {"name": "tools", "description": "the catalogue"},
    {"name": "approvals", "description": "the decisions of approvers"},
    {"name": "policy", "description": "the policy as an OPA bundle"},
    {"name": "admin", "description": "operating a running gateway"},
    {"name": "meta", "description": "health, readiness, metrics, this document, OAuth"},
]


def build_openapi() -> dict[str, Any]:
    request_schema = ExecutionRequestBody.model_json_schema(
        ref_template="#/components/schemas/{model}"
    )
    defs = request_schema.pop("$defs", {})
    own = schemas()
    clash = sorted(defs.keys() & own.keys())
    if clash:  # a model of the request named as one of the resources: one would hide the other
        raise ValueError(f"the request body's schemas {clash} clash with the resources'")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Toolgate",
            "version": __version__,
            "description": "A declarative tool-execution gateway for AI agents. Every "
            "operation has a stable operationId; see docs/api.md.",
        },
        "tags": TAGS,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {**defs, "ExecutionRequest": request_schema, **own},
            "responses": _RESPONSES,
            "headers": _HEADERS,
            "parameters": _PARAMETERS,
        },
        "security": [{"bearer": []}],
        "paths": {**_execution_paths(), **_approval_paths(), **_other_paths()},
    }


def _execution_paths() -> dict[str, Any]:
    busy = _shared("TooManyRequests")
    return {
        "/v1/executions": {
            "post": _operation(
                "createExecution",
                "executions",
                "Run one tool call through the pipeline (Prefer: respond-async: answer at once)",
                {
                    "200": _json("the execution reached a terminal state", "Execution"),
                    "202": _json(
                        "not terminal: queued (respond-async), awaiting_approval", "Execution"
                    ),
                    "400": _problem(
                        "a malformed body (invalid_request, malformed_json, ...), or the "
                        "idempotency key missing (idempotency_key_required) or in conflict "
                        "(idempotency_key_conflict)"
                    ),
                    "403": _problem("the body's actor is not the caller (actor_mismatch)"),
                    "409": _problem(
                        "the (run_id, call_id) was used for another request (call_id_reused), "
                        "or the idempotency key's first call is unfinished "
                        "(idempotency_key_in_flight, retryable, with Retry-After)",
                        retry_after=True,
                    ),
                    "422": _problem(
                        "the idempotency key was used with other arguments (idempotency_key_reused)"
                    ),
                    "429": busy,
                },
                parameters=[
                    _param("IdempotencyKey"),
                    {
                        "name": "Prefer",
                        "in": "header",
                        "description": "respond-async: answer 202 queued once the call is "
                        "accepted; a worker runs it",
                        "schema": {"type": "string", "examples": ["respond-async"]},
                    },
                    _param("Traceparent"),
                ],
                body=_EXECUTION_BODY,
            ),
            "get": _operation(
                "listExecutions",
                "executions",
                "The caller's executions, newest first, by run_id and call_id",
                {
                    "200": _json(
                        "at most 100 executions, each as getExecution gives it", "ExecutionList"
                    ),
                    "400": _problem(
                        "a query parameter this route does not take, given twice, or not an "
                        "id (invalid_query)"
                    ),
                },
                parameters=[
                    _query("run_id", "only this run's", _CALL_ID),
                    _query("call_id", "only this call's", _CALL_ID),
                ],
            ),
        },
        "/v1/plans": {
            "post": _operation(
                "createPlan",
                "executions",
                "What POST /v1/executions with this body would do, with no side effect",
                {
                    "200": _json("the plan", "Plan"),
                    "400": _problem(
                        "a malformed body, or an idempotency key missing or in conflict"
                    ),
                    "403": _problem("the body's actor is not the caller (actor_mismatch)"),
                    "429": busy,
                },
                parameters=[_param("IdempotencyKey"), _param("Traceparent")],
                body=_EXECUTION_BODY,
            ),
        },
        "/v1/executions/{execution_id}": {
            "get": _operation(
                "getExecution",
                "executions",
                "One execution (?wait=SECONDS long-polls for a terminal state)",
                {
                    "200": _json("terminal", "Execution"),
                    "202": _json("not terminal (yet): ask again", "Execution"),
                    "400": _problem(
                        "wait is not a number from 0 to 60 (invalid_wait), or a query "
                        "parameter this route does not take, or given twice (invalid_query)"
                    ),
                    "404": _problem("no such execution, or not the caller's (not_found)"),
                    "429": busy,
                },
                parameters=[
                    _param("ExecutionId"),
                    _query(
                        "wait",
                        "hold the request up to this many seconds for a terminal state",
                        {"type": "number", "minimum": 0, "maximum": 60},
                    ),
                ],
            )
        },
        "/v1/executions/{execution_id}/events": {
            "get": _operation(
                "listExecutionEvents",
                "executions",
                "The execution's append-only event log, a page at a time (Accept: "
                "text/event-stream: live, resumed with Last-Event-ID)",
                {
                    "200": {
                        "description": "a page of the events in order of seq, or their live stream",
                        "headers": {"Cache-Control": _header("CacheControl")},
                        "content": {
                            "application/json": {"schema": ref("ExecutionEvents")},
                            "text/event-stream": _EVENTS_STREAM,
                        },
                    },
                    "400": _problem(
                        "after is not an integer of 0 or more (invalid_after), "
                        "Last-Event-ID is not an event's seq (invalid_last_event_id), or a "
                        "query parameter this route does not take, or given twice "
                        "(invalid_query)"
                    ),
                    "404": _problem("no such execution, or not the caller's (not_found)"),
                    "429": busy,
                },
                parameters=[
                    _param("ExecutionId"),
                    _query(
                        "after",
                        "only the events with a seq greater than this",
                        {"type": "integer", "minimum": 0},
                    ),
                    _param("LastEventId"),
                ],
            )
        },
        "/v1/runs/{run_id}/events": {
            "get": _operation(
                "listRunEvents",
                "executions",
                "The events of a run's executions the caller may see (Accept: "
                "text/event-stream: live)",
                {
                    "200": {
                        "description": "a page of the events, execution by execution, or "
                        "their stream",
                        "headers": {"Cache-Control": _header("CacheControl")},
                        "content": {
                            "application/json": {"schema": ref("RunEvents")},
                            "text/event-stream": _EVENTS_STREAM,
                        },
                    },
                    "400": _problem(
                        "after is not a run cursor (invalid_after), nor Last-Event-ID "
                        "(invalid_last_event_id), or a query parameter this route does not "
                        "take, or given twice (invalid_query)"
                    ),
                    "429": busy,
                },
                parameters=[
                    {"name": "run_id", "in": "path", "required": True, "schema": _STR},
                    _query(
                        "after",
                        "the cursor of the page you have (execution_id:seq pairs, "
                        "comma-separated): only the events after it",
                        _STR,
                    ),
                    _param("LastEventId"),
                ],
            )
        },
        "/v1/executions/{execution_id}/cancel": {
            "post": _operation(
                "cancelExecution",
                "executions",
                "Ask an execution to stop (queued or awaiting approval: closed at once)",
                {
                    "200": _json("closed: completed, outcome cancelled", "Execution"),
                    "202": _json("cancelling: follow it with ?wait=", "Execution"),
                    "404": _problem("no such execution, or not the caller's (not_found)"),
                    "409": _problem("already completed (already_completed)"),
                },
                parameters=[_param("ExecutionId")],
            )
        },
        "/v1/executions/{execution_id}/resolve": {
            "post": _operation(
                "resolveExecution",
                "executions",
                "A person settles an unknown outcome (approvers only)",
                {
                    "200": _json("resolved", "Execution"),
                    "400": _problem(
                        "outcome is not succeeded or failed (invalid_outcome), no note "
                        "(note_required), or a malformed body (invalid_request, ...)"
                    ),
                    "403": _problem(
                        "not an approver (not_an_approver), or the caller's own "
                        "call (self_approval)"
                    ),
                    "404": _problem("no such execution, or not visible (not_found)"),
                    "409": _problem("the outcome is not unknown (not_unknown)"),
                },
                parameters=[_param("ExecutionId")],
                body=_json_body(
                    {
                        "outcome": {"type": "string", "enum": ["succeeded", "failed"]},
                        "note": {"type": "string", "description": "how you know"},
                    },
                    "outcome",
                    "note",
                ),
            )
        },
        "/v1/cancellations": {
            "post": _operation(
                "cancelByToken",
                "executions",
                "Cancel every unfinished execution of the caller sent with a cancellation_token",
                {
                    "200": _json("nothing to cancel (count 0)", "ExecutionList"),
                    "202": _json("the executions asked to stop", "ExecutionList"),
                },
                body=_json_body(
                    {"cancellation_token": {"type": "string", "minLength": 1}},
                    "cancellation_token",
                ),
            )
        },
    }


def _approval_paths() -> dict[str, Any]:
    not_pending = _problem(
        "the approval is not pending: approval_<status> (approval_approved, approval_denied, "
        "approval_expired, approval_used, approval_withdrawn)"
    )
    may_not = _problem(
        "the caller may not decide it (not_an_approver), or it is their own request (self_approval)"
    )
    comment = {"type": ["string", "null"]}
    return {
        "/v1/approvals": {
            "get": _operation(
                "listApprovals",
                "approvals",
                "Approvals, newest first, at most 100: the inbox (approvers only; "
                "?status=pending), or by run_id and call_id those of a call the caller may "
                "see (its requester, and whoever may decide it)",
                {
                    "200": _json("the approvals", "ApprovalList"),
                    "400": _problem(
                        "status is not an approval state (invalid_status), or a query "
                        "parameter this route does not take, given twice, or not an id "
                        "(invalid_query)"
                    ),
                    "403": _problem(
                        "without run_id or call_id: the caller holds no approver role "
                        "(not_an_approver)"
                    ),
                },
                parameters=[
                    _query(
                        "status",
                        "only the approvals in this state",
                        {"type": "string", "enum": [s.value for s in ApprovalStatus]},
                    ),
                    _query("run_id", "only the approvals of this run's calls", _CALL_ID),
                    _query("call_id", "only the approvals of calls with this call id", _CALL_ID),
                ],
            )
        },
        "/v1/approvals/{approval_id}": {
            "get": _operation(
                "getApproval",
                "approvals",
                "What the approver sees: tool, arguments, preview, reasons",
                {
                    "200": _json("the approval", "Approval"),
                    "404": _problem("no such approval, or not visible (not_found)"),
                },
                parameters=[_param("ApprovalId")],
            )
        },
        "/v1/approvals/{approval_id}/approve": {
            "post": _operation(
                "approveApproval",
                "approvals",
                "Approve: the gateway resumes the call (default), or returns an approval_token",
                {
                    "200": _json(
                        'approved with "resume": false; approval_token', "ApprovalDecision"
                    ),
                    "202": _json("approved; the call resumes", "ApprovalDecision"),
                    "403": may_not,
                    "404": _problem("no such approval (not_found)"),
                    "409": not_pending,
                    "422": _problem(
                        "the edit is refused (argument_not_editable, edit_refused); the "
                        "approval stays pending"
                    ),
                },
                parameters=[_param("ApprovalId")],
                body=_json_body(
                    {
                        "comment": comment,
                        "resume": {"type": "boolean", "default": True},
                        "arguments": {
                            "type": "object",
                            "description": "edits of the arguments the tool declares "
                            "editable (approval.editable); the edited call is checked again",
                        },
                    },
                    optional=True,
                ),
            )
        },
        "/v1/approvals/{approval_id}/deny": {
            "post": _operation(
                "denyApproval",
                "approvals",
                "Deny: the parked call ends failed in phase policy",
                {
                    "200": _json("denied", "ApprovalDecision"),
                    "403": may_not,
                    "404": _problem("no such approval (not_found)"),
                    "409": not_pending,
                },
                parameters=[_param("ApprovalId")],
                body=_json_body({"comment": comment}, optional=True),
            )
        },
    }


def _other_paths() -> dict[str, Any]:
    public: list[dict[str, list[str]]] = []
    metadata = {
        "200": _json("the protected resource metadata (RFC 9728)", {"type": "object"}),
        "404": _problem("jwt is not configured, or no protected resource at this path"),
    }
    return {
        "/v1/artifacts/{artifact_id}": {
            "get": _operation(
                "getArtifact",
                "executions",
                "An artifact (a screenshot) of one of the caller's executions",
                {
                    "200": {
                        "description": "the artifact's bytes, in its media type",
                        "headers": {
                            "ETag": _header("ETag"),
                            "Cache-Control": _header("CacheControl"),
                        },
                        "content": {"image/png": {"schema": _BINARY}},
                    },
                    "404": _problem("no such artifact, or not the caller's (artifact_not_found)"),
                },
                parameters=[
                    {"name": "artifact_id", "in": "path", "required": True, "schema": _STR}
                ],
            )
        },
        "/v1/policy/bundle": {
            "get": _operation(
                "getPolicyBundle",
                "policy",
                "The policy as an OPA bundle (.tar.gz) with an ETag, for OPA to poll",
                {
                    "200": {
                        "description": "the bundle",
                        "headers": {
                            "ETag": _header("ETag"),
                            "Cache-Control": _header("CacheControl"),
                        },
                        "content": {"application/gzip": {"schema": _BINARY}},
                    },
                    "304": {
                        "description": "unchanged: If-None-Match names its ETag",
                        "headers": {"ETag": _header("ETag")},
                    },
                },
                parameters=[
                    {
                        "name": "If-None-Match",
                        "in": "header",
                        "description": "the ETag you have: 304 when it is still the bundle's",
                        "schema": _STR,
                    }
                ],
            )
        },
        "/v1/admin/reload": {
            "post": _operation(
                "reloadGateway",
                "admin",
                "Reload tools.d, rego/ and policies/: checked first, swapped atomically "
                "(admins only; docs/deploy.md#reload)",
                {
                    "200": _json("applied or unchanged", "ReloadResult"),
                    "403": _problem("not listed in admins (not_an_admin)"),
                    "422": _problem("refused (reload_refused): faults; nothing changed"),
                },
            )
        },
        "/v1/tools": {
            "get": _operation(
                "listTools",
                "tools",
                "The tools the caller may see (the policy's listing rule, as MCP tools/list), "
                "or each as an LLM tool definition",
                {
                    "200": _json(
                        "the tools; with format, the definitions",
                        {"oneOf": [ref("ToolDefinitions"), ref("ToolList")]},
                    ),
                    "400": _problem(
                        "an unknown format (invalid_format), or a query parameter this route "
                        "does not take, or given twice (invalid_query)"
                    ),
                },
                parameters=[
                    _query(
                        "format",
                        "llm: {name, description, parameters}; openai: {type: function, "
                        "function: {name, description, parameters}}; anthropic: {name, "
                        "description, input_schema}; mcp: {name, description, inputSchema, "
                        "outputSchema when the tool declares output}",
                        {"type": "string", "enum": list(TOOL_FORMATS)},
                    ),
                    _WORKSPACE,
                ],
            )
        },
        "/v1/tools/{name}": {
            "get": _operation(
                "getTool",
                "tools",
                "One tool with its input (and declared output) as JSON Schema",
                {
                    "200": _json("the tool", "Tool"),
                    "400": _problem(
                        "a query parameter this route does not take, or given twice (invalid_query)"
                    ),
                    "404": _problem(
                        "unknown tool, or one the caller may not see (not_found), or a version "
                        "that does not resolve (version_not_found, tool_disabled, "
                        "invalid_version_range)"
                    ),
                },
                parameters=[
                    {"name": "name", "in": "path", "required": True, "schema": _STR},
                    _query("version", "an exact version or a range", {"type": "string"}),
                    _WORKSPACE,
                ],
            )
        },
        "/metrics": {
            "get": _operation(
                "getMetrics",
                "meta",
                "Prometheus metrics (no key when metrics.open)",
                {
                    "200": {
                        "description": "the text exposition",
                        "content": {"text/plain": {"schema": _STR}},
                    },
                    "404": _problem("metrics are off (not_found)"),
                },
                security=[{"bearer": []}, {}],
            )
        },
        "/healthz": {
            "get": _operation(
                "getHealth", "meta", "Liveness", {"200": _json("alive", "Health")}, security=public
            )
        },
        "/readyz": {
            "get": _operation(
                "getReadiness",
                "meta",
                "Readiness (store reachable), with the catalogue and policy revisions",
                {
                    "200": _json("ready", "Readiness"),
                    "503": _json("not ready: the store does not answer", "Readiness"),
                },
                security=public,
            )
        },
        "/openapi.json": {
            "get": _operation(
                "getOpenApiDocument",
                "meta",
                "This document",
                {"200": _json("the OpenAPI 3.1 document", {"type": "object"})},
            )
        },
        "/.well-known/oauth-protected-resource": {
            "get": _operation(
                "getProtectedResourceMetadata",
                "meta",
                "The OAuth protected resource metadata of /mcp (RFC 9728)",
                metadata,
                security=public,
            )
        },
        "/.well-known/oauth-protected-resource/{path}": {
            "get": _operation(
                "getProtectedResourceMetadataAt",
                "meta",
                "The same metadata at the resource's path (RFC 9728 section 3.1: .../mcp)",
                metadata,
                parameters=[
                    {
                        "name": "path",
                        "in": "path",
                        "required": True,
                        "description": "the resource's path, e.g. mcp",
                        "schema": _STR,
                    }
                ],
                security=public,
            )
        },
    }
