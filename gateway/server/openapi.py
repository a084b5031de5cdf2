"""The OpenAPI document of the HTTP surface, built from the same models the code uses."""

from __future__ import annotations

from typing import Any

from gateway import __version__
from gateway.declarations.definitions import TOOL_FORMATS
from gateway.pipeline.request import ExecutionRequestBody

_PROBLEM = {"$ref": "#/components/schemas/Problem"}


def _resp(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    media = "application/json" if schema is not None else "application/problem+json"
    return {"description": description, "content": {media: {"schema": schema or _PROBLEM}}}


_ERRORS = {
    "401": _resp("missing or invalid API key"),
    "403": _resp("not allowed for this principal"),
}
_BUSY = {
    "429": _resp("the principal holds its share of a bound on load (too_many_*); Retry-After"),
    "503": _resp("everyone holds the total of a bound on load (overloaded); Retry-After"),
}
"""The refusals of the bounds on load (docs/api.md#bounded-load-429-and-503)."""
_EXECUTION = {"$ref": "#/components/schemas/Execution"}
_EXECUTION_REQUEST = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ExecutionRequest"}}},
}
"""The body of ``POST /v1/executions`` and ``POST /v1/plans``."""
_ID_PARAM = {"name": "execution_id", "in": "path", "required": True, "schema": {"type": "string"}}


_APPROVAL_PARAM = {
    "name": "approval_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
}


def _json_body(properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    return {"required": False, "content": {"application/json": {"schema": schema}}}


def build_openapi() -> dict[str, Any]:
    request_schema = ExecutionRequestBody.model_json_schema(
        ref_template="#/components/schemas/{model}"
    )
    defs = request_schema.pop("$defs", {})
    return {
        "openapi": "3.1.0",
        "info": {"title": "Toolgate", "version": __version__},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                **defs,
                "ExecutionRequest": request_schema,
                "Execution": _execution_schema(),
                "Plan": _plan_schema(),
                "Problem": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string"},
                        "title": {"type": "string"},
                        "status": {"type": "integer"},
                        "code": {"type": "string"},
                        "detail": {"type": "string"},
                        "retryable": {"type": "boolean"},
                    },
                    "required": ["type", "title", "status", "code", "detail"],
                },
            },
        },
        "security": [{"bearer": []}],
        "paths": _paths(),
    }


def _paths() -> dict[str, Any]:
    return {
        "/v1/executions": {
            "post": {
                "summary": "Run one tool call through the pipeline",
                "parameters": [
                    {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}},
                    {
                        "name": "traceparent",
                        "in": "header",
                        "description": "W3C trace context; a malformed value is ignored",
                        "schema": {"type": "string"},
                    },
                ],
                "requestBody": _EXECUTION_REQUEST,
                "responses": {
                    "200": _resp("the execution reached a terminal state", _EXECUTION),
                    "202": _resp(
                        "the execution is not finished (e.g. awaiting approval)", _EXECUTION
                    ),
                    "400": _resp("malformed request or missing idempotency key"),
                    "409": _resp("same call or idempotency key still in flight / reused"),
                    "413": _resp("body over the size limit"),
                    "422": _resp("idempotency key reused with a different payload"),
                    **_BUSY,
                    **_ERRORS,
                },
            },
            "get": {
                "summary": "Find executions of the caller by run_id and call_id",
                "parameters": [
                    {"name": "run_id", "in": "query", "schema": {"type": "string"}},
                    {"name": "call_id", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {"200": _resp("matching executions", {"type": "object"}), **_ERRORS},
            },
        },
        "/v1/plans": {
            "post": {
                "summary": "What POST /v1/executions with this body would do, with no side effect",
                "requestBody": _EXECUTION_REQUEST,
                "responses": {
                    "200": _resp("the plan", {"$ref": "#/components/schemas/Plan"}),
                    "400": _resp("malformed request or missing idempotency key"),
                    "413": _resp("body over the size limit"),
                    **_BUSY,
                    **_ERRORS,
                },
            },
        },
        "/v1/executions/{execution_id}": {
            "get": {
                "summary": "One execution",
                "parameters": [_ID_PARAM],
                "responses": {
                    "200": _resp("terminal", _EXECUTION),
                    "202": _resp("not terminal", _EXECUTION),
                    "404": _resp("no such execution"),
                    **_BUSY,
                    **_ERRORS,
                },
            }
        },
        "/v1/executions/{execution_id}/events": {
            "get": {
                "summary": "The execution's append-only event log (Accept: text/event-stream: "
                "live, Server-Sent Events resumed with Last-Event-ID)",
                "parameters": [
                    _ID_PARAM,
                    {
                        "name": "after",
                        "in": "query",
                        "description": "only the events with a seq greater than this",
                        "schema": {"type": "integer", "minimum": 0},
                    },
                ],
                "responses": {
                    "200": _resp("events in order of seq", {"type": "object"}),
                    "400": _resp("after is not an integer of 0 or more (invalid_after)"),
                    "404": _resp("no such execution"),
                    **_BUSY,
                    **_ERRORS,
                },
            }
        },
        "/v1/runs/{run_id}/events": {
            "get": {
                "summary": "The events of a run's executions (Accept: text/event-stream: live)",
                "parameters": [
                    {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": _resp("events, execution by execution", {"type": "object"}),
                    "400": _resp("Last-Event-ID is not a run cursor (invalid_last_event_id)"),
                    **_BUSY,
                    **_ERRORS,
                },
            }
        },
        "/v1/executions/{execution_id}/cancel": {
            "post": {
                "summary": "Ask an execution to stop (queued/parked: cancelled at once)",
                "parameters": [_ID_PARAM],
                "responses": {
                    "200": _resp("cancelled", _EXECUTION),
                    "202": _resp("cancelling", _EXECUTION),
                    "409": _resp("already completed"),
                    **_ERRORS,
                },
            }
        },
        "/v1/executions/{execution_id}/resolve": {
            "post": {
                "summary": "A person settles an unknown outcome (approvers)",
                "parameters": [_ID_PARAM],
                "requestBody": _json_body(
                    {"outcome": {"enum": ["succeeded", "failed"]}, "note": {"type": "string"}}
                ),
                "responses": {
                    "200": _resp("resolved", _EXECUTION),
                    "409": _resp("the outcome is not unknown"),
                    **_ERRORS,
                },
            }
        },
        "/v1/cancellations": {
            "post": {
                "summary": "Cancel every unfinished execution carrying a cancellation_token",
                "requestBody": _json_body({"cancellation_token": {"type": "string"}}),
                "responses": {
                    "200": _resp("nothing to cancel", {"type": "object"}),
                    "202": _resp("the executions asked to stop", {"type": "object"}),
                    **_ERRORS,
                },
            }
        },
        "/v1/approvals/{approval_id}": {
            "get": {
                "summary": "What the approver sees: tool, arguments, preview, reasons",
                "parameters": [_APPROVAL_PARAM],
                "responses": {"200": _resp("the approval", {"type": "object"}), **_ERRORS},
            }
        },
        "/v1/approvals/{approval_id}/approve": {
            "post": {
                "summary": "Approve: resume the call (default) or return an approval_token",
                "parameters": [_APPROVAL_PARAM],
                "requestBody": _json_body(
                    {
                        "comment": {"type": "string"},
                        "resume": {"type": "boolean"},
                        "arguments": {
                            "type": "object",
                            "description": "edits of the arguments the tool declares "
                            "editable (approval.editable); the edited call is checked again",
                        },
                    }
                ),
                "responses": {
                    "200": _resp("approved; approval_token returned", {"type": "object"}),
                    "202": _resp("approved; the call resumes", {"type": "object"}),
                    "409": _resp(
                        "not pending: approval_<status> (approved, denied, expired, "
                        "used, withdrawn)"
                    ),
                    "422": _resp(
                        "the edit is refused (argument_not_editable, edit_refused); the "
                        "approval stays pending"
                    ),
                    **_ERRORS,
                },
            }
        },
        "/v1/approvals/{approval_id}/deny": {
            "post": {
                "summary": "Deny: the parked call ends failed in phase policy",
                "parameters": [_APPROVAL_PARAM],
                "requestBody": _json_body({"comment": {"type": "string"}}),
                "responses": {
                    "200": _resp("denied", {"type": "object"}),
                    "409": _resp("not pending: approval_<status>, as for approve"),
                    **_ERRORS,
                },
            }
        },
        "/v1/artifacts/{artifact_id}": {
            "get": {
                "summary": "An artifact (e.g. a screenshot) of one of the caller's executions",
                "parameters": [
                    {
                        "name": "artifact_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    }
                ],
                "responses": {
                    "200": {"description": "the artifact's bytes"},
                    "404": _resp("no such artifact (or not the caller's)"),
                    **_ERRORS,
                },
            }
        },
        "/v1/policy/bundle": {
            "get": {
                "summary": "The policy as an OPA bundle (.tar.gz) with an ETag, for OPA to poll",
                "responses": {
                    "200": {"description": "the bundle (application/gzip)"},
                    "304": {"description": "unchanged: If-None-Match names its ETag"},
                    **_ERRORS,
                },
            }
        },
        "/v1/admin/reload": {
            "post": {
                "summary": "Reload tools.d, rego/ and policies/: checked first, swapped atomically",
                "description": "Only the principals listed in admins. See docs/deploy.md#reload.",
                "responses": {
                    "200": _resp(
                        "status (applied|unchanged), revisions, previous, generation",
                        {"type": "object"},
                    ),
                    "403": _resp("not an admin (not_an_admin)"),
                    "422": _resp("refused (reload_refused): faults; nothing changed"),
                    **_ERRORS,
                },
            }
        },
        "/v1/tools": {
            "get": {
                "summary": "The tool catalogue, or every enabled tool as an LLM tool definition",
                "parameters": [
                    {
                        "name": "format",
                        "in": "query",
                        "description": (
                            "llm: {name, description, parameters}; openai: {type: function, "
                            "function: {name, description, parameters}}; anthropic: {name, "
                            "description, input_schema}; mcp: {name, description, inputSchema, "
                            "outputSchema when the tool declares output}"
                        ),
                        "schema": {"enum": list(TOOL_FORMATS)},
                    }
                ],
                "responses": {
                    "200": _resp(
                        "tools; with format: {format, items, count, names}", {"type": "object"}
                    ),
                    "400": _resp("an unknown format (invalid_format)"),
                    **_ERRORS,
                },
            }
        },
        "/v1/tools/{name}": {
            "get": {
                "summary": "One tool with its input (and declared output) as JSON Schema",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "version", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": _resp("the tool", {"type": "object"}),
                    "404": _resp("unknown tool or version"),
                    **_ERRORS,
                },
            }
        },
        "/v1/approvals": {
            "get": {
                "summary": "Approvals (approvers only)",
                "parameters": [{"name": "status", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": _resp("approvals", {"type": "object"}), **_ERRORS},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (keyless when metrics.open)",
                "responses": {"200": {"description": "the text exposition"}, **_ERRORS},
            }
        },
        "/healthz": {
            "get": {
                "security": [],
                "summary": "Liveness",
                "responses": {"200": {"description": "alive"}},
            }
        },
        "/readyz": {
            "get": {
                "security": [],
                "summary": "Readiness (store reachable), with the catalogue and policy revisions",
                "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}},
            }
        },
        "/openapi.json": {
            "get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI"}}}
        },
    }


def _plan_schema() -> dict[str, Any]:
    obj, nullable = {"type": "object"}, {"type": ["object", "null"]}
    return {
        "type": "object",
        "properties": {
            "dry_run": {"const": True},
            "would": {"enum": ["run", "await_approval", "fail"]},
            "tool": obj,
            "arguments": nullable,
            "arguments_sha256": {"type": ["string", "null"]},
            "validation": obj,
            "state_guards": obj,
            "policy": nullable,
            "locks": {"type": "array", "items": obj},
            "preview": {},
            "preview_available": {"type": "boolean"},
            "error": nullable,
            "revisions": {
                "type": "object",
                "properties": {"catalogue": {"type": "string"}, "policy": {"type": "string"}},
            },
        },
        "required": ["dry_run", "would", "tool", "validation", "policy", "locks", "error"],
    }


def _execution_schema() -> dict[str, Any]:
    result = {
        "type": ["object", "null"],
        "properties": {
            "call_id": {"type": "string"},
            "tool_version": {"type": ["string", "null"]},
            "outcome": {"enum": ["succeeded", "failed", "partial", "unknown", "cancelled"]},
            "data": {},
            "error": {
                "type": ["object", "null"],
                "properties": {
                    "type": {"type": "string"},
                    "phase": {
                        "enum": [
                            "resolve",
                            "validate",
                            "policy",
                            "execute",
                            "verify",
                            "commit",
                            None,
                        ]
                    },
                    "retryable": {"type": "boolean"},
                    "message": {"type": "string"},
                },
            },
            "side_effect": {"type": "object"},
            "evidence": {"type": "array", "items": {"type": "object"}},
            "timing": {"type": "object"},
            "truncated": {"type": "boolean"},
        },
    }
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "run_id": {"type": "string"},
            "call_id": {"type": "string"},
            "status": {
                "enum": ["queued", "awaiting_approval", "running", "cancelling", "completed"]
            },
            "tool": {"type": "object"},
            "result": result,
            "approval": {"type": ["object", "null"]},
            "links": {"type": "object"},
        },
        "required": ["id", "run_id", "call_id", "status", "tool", "result", "links"],
    }
