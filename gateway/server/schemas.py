"""The JSON Schemas of what the REST door answers, as components of ``/openapi.json``.

Each is the shape its renderer writes (``server/render.py``, the records' ``to_json``), with
the keys always written marked required, so a generated client can read every answer; the
enumerations come from the enums the code uses. Objects stay open (no
``additionalProperties: false``): a key added later must not break a client built today.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from gateway.declarations.definitions import TOOL_FORMATS
from gateway.service.executions import PAGE_BYTES, PAGE_EVENTS
from gateway.types import ApprovalStatus, LockMode, Outcome, Phase, Risk, Status
from gateway.types import SideEffect as SideEffectKind

Schema = dict[str, Any]

_STR: Schema = {"type": "string"}
_INT: Schema = {"type": "integer"}
_BOOL: Schema = {"type": "boolean"}
_OBJ: Schema = {"type": "object"}
_ANY: Schema = {}
_STR_OR_NULL: Schema = {"type": ["string", "null"]}
_INT_OR_NULL: Schema = {"type": ["integer", "null"]}
_DEPRECATED: Schema = {
    "type": ["boolean", "string"],
    "description": "false, true, or the declaration's deprecation message",
}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _enum(kind: type[Enum]) -> Schema:
    return {"type": "string", "enum": [member.value for member in kind]}


def _object(properties: Schema, *required: str, description: str | None = None) -> Schema:
    out: Schema = {"type": "object", "properties": properties, "required": list(required)}
    if description is not None:
        out["description"] = description
    return out


def _nullable(name: str) -> Schema:
    return {"anyOf": [ref(name), {"type": "null"}]}


def _list_of(item: Schema, *keys: str) -> Schema:
    """``{<keys...>, "items": [...], "count": N}``, the shape of every listing."""
    properties = {key: _STR for key in keys}
    return _object(
        {**properties, "items": {"type": "array", "items": item}, "count": _INT},
        *keys,
        "items",
        "count",
    )


PROBLEM = _object(
    {
        "type": {"type": "string", "description": "https://toolgate.dev/problems/<code>"},
        "title": _STR,
        "status": _INT,
        "code": {
            "type": "string",
            "description": "the stable code of the error (docs/api.md#request-errors-problemjson)",
        },
        "detail": _STR,
        "retryable": _BOOL,
        "retry_after": {"type": "integer", "minimum": 0, "description": "as Retry-After"},
    },
    "type",
    "title",
    "status",
    "code",
    "detail",
    description="An error about the request (RFC 9457), with a stable code; some codes add "
    "fields (errors, execution_id, setting, limit, faults, ...).",
)


def schemas() -> dict[str, Schema]:
    """Every schema the operations refer to by name (without the request body's, which
    ``openapi.py`` builds from the model the gateway parses with)."""
    return {
        "Problem": PROBLEM,
        "Revisions": _object({"catalogue": _STR, "policy": _STR}, "catalogue", "policy"),
        "CallError": _call_error(),
        "SideEffect": _object(
            {"attempted": _BOOL, "committed": _BOOL, "summary": _STR},
            "attempted",
            "committed",
            "summary",
        ),
        "ToolResult": _tool_result(),
        "Execution": _execution(),
        "ExecutionList": _list_of(ref("Execution")),
        "Event": _object(
            {
                "id": _STR,
                "execution_id": _STR,
                "seq": {"type": "integer", "minimum": 0},
                "type": {"type": "string", "description": "tool.requested, tool.completed, ..."},
                "version": _INT,
                "at_ms": _INT,
                "data": _OBJ,
            },
            "id",
            "execution_id",
            "seq",
            "type",
            "version",
            "at_ms",
            "data",
        ),
        "ExecutionEvents": _object(
            {
                "execution_id": _STR,
                "items": {"type": "array", "items": ref("Event")},
                "next": _STR_OR_NULL,
            },
            "execution_id",
            "items",
            "next",
            description=f"a page of an execution's events (at most {PAGE_EVENTS}, and "
            f"{PAGE_BYTES // 1024} KiB of their data past the first); next: the page after "
            "it (after= the last seq given), null once none remains",
        ),
        "RunEvents": _object(
            {
                "run_id": _STR,
                "items": {"type": "array", "items": ref("Event")},
                "cursor": _STR_OR_NULL,
                "next": _STR_OR_NULL,
            },
            "run_id",
            "items",
            "cursor",
            "next",
            description=f"a page of a run's events (at most {PAGE_EVENTS}, and "
            f"{PAGE_BYTES // 1024} KiB of their data past the first); cursor: the last seq "
            "you have of each execution, for after= or Last-Event-ID; next: the page after "
            "it, null once none remains",
        ),
        "Plan": _plan(),
        "ToolSummary": _tool_summary(),
        "ToolList": _list_of(ref("ToolSummary")),
        "Tool": _tool(),
        "ToolDefinitions": _object(
            {
                "format": {"type": "string", "enum": list(TOOL_FORMATS)},
                "items": {"type": "array", "items": _OBJ},
                "count": _INT,
                "names": {"type": "object", "additionalProperties": _STR},
            },
            "format",
            "items",
            "count",
            "names",
            description="every enabled tool as an LLM tool definition; names maps each "
            "item's name back to the tool name",
        ),
        "Approval": _approval(),
        "ApprovalList": _list_of(ref("Approval")),
        "ApprovalDecision": _approval_decision(),
        "ReloadResult": _object(
            {
                "status": {"type": "string", "enum": ["applied", "unchanged"]},
                "revisions": ref("Revisions"),
                "previous": ref("Revisions"),
                "shadow": {
                    "anyOf": [
                        _object(
                            {"revision": _STR, "previous": _STR},
                            "revision",
                            "previous",
                            description="the shadow (candidate) policy's revision now and "
                            "before the reload",
                        ),
                        {"type": "null"},
                    ]
                },
                "generation": _INT,
                "adapters_rebuilt": {"type": "array", "items": _STR},
                "settings_applied": {"type": "array", "items": _STR},
                "restart_needed": {"type": "array", "items": _STR},
                "warnings": {"type": "array", "items": _STR},
                "seconds": {"type": "number"},
            },
            "status",
            "revisions",
            "previous",
            "shadow",
            "generation",
            "adapters_rebuilt",
            "settings_applied",
            "restart_needed",
            "warnings",
            "seconds",
        ),
        "Health": _object({"status": {"type": "string", "enum": ["ok"]}}, "status"),
        "Readiness": _object(
            {
                "status": {"type": "string", "enum": ["ready", "not_ready"]},
                "store": {"type": "string", "enum": ["ok", "unavailable"]},
                "tools": _INT,
                "policy": _STR,
                "revisions": ref("Revisions"),
                "generation": _INT,
            },
            "status",
            "store",
            "tools",
            "policy",
            "revisions",
            "generation",
        ),
    }


def _call_error() -> Schema:
    phase = {"type": ["string", "null"], "enum": [*(p.value for p in Phase), None]}
    return _object(
        {"type": _STR, "phase": phase, "retryable": _BOOL, "message": _STR},
        "type",
        "phase",
        "retryable",
        "message",
        description="why a call did not succeed (docs/api.md#call-errors-http-200-resulterror)",
    )


def _tool_result() -> Schema:
    return _object(
        {
            "call_id": _STR,
            "tool_version": _STR_OR_NULL,
            "outcome": _enum(Outcome),
            "data": _ANY,
            "error": _nullable("CallError"),
            "side_effect": ref("SideEffect"),
            "evidence": {"type": "array", "items": _OBJ},
            "timing": _object({"queued_ms": _INT, "running_ms": _INT}, "queued_ms", "running_ms"),
            "truncated": _BOOL,
            "resolution": {
                **_OBJ,
                "description": "who settled an unknown outcome (by, note, at_ms, was)",
            },
        },
        "call_id",
        "tool_version",
        "outcome",
        "data",
        "error",
        "side_effect",
        "evidence",
        "timing",
        "truncated",
    )


def _execution() -> Schema:
    approval = _object(
        {
            "id": _STR,
            "status": _enum(ApprovalStatus),
            "expires_at_ms": _INT,
            "reasons": {"type": "array", "items": _STR},
        },
        "id",
        "status",
        "expires_at_ms",
        "reasons",
    )
    links = _object({"self": _STR, "events": _STR, "approval": _STR}, "self", "events")
    return _object(
        {
            "id": _STR,
            "run_id": _STR,
            "turn_id": _STR,
            "call_id": _STR,
            "status": _enum(Status),
            "tool": _object({"name": _STR, "version": _STR_OR_NULL}, "name", "version"),
            "actor": _object({"user_id": _STR, "agent_id": _STR}, "user_id", "agent_id"),
            "workspace": _object({"id": _STR}, "id"),
            "result": _nullable("ToolResult"),
            "approval": {"anyOf": [approval, {"type": "null"}]},
            "created_at_ms": _INT,
            "updated_at_ms": _INT,
            "links": links,
        },
        "id",
        "run_id",
        "turn_id",
        "call_id",
        "status",
        "tool",
        "actor",
        "workspace",
        "result",
        "approval",
        "created_at_ms",
        "updated_at_ms",
        "links",
    )


def _plan() -> Schema:
    obj_or_null = {"type": ["object", "null"]}
    lock = _object({"key": _STR, "mode": _enum(LockMode)}, "key", "mode")
    return _object(
        {
            "dry_run": {"const": True},
            "would": {"type": "string", "enum": ["run", "await_approval", "fail"]},
            "tool": _object(
                {"name": _STR, "version": _STR_OR_NULL, "deprecated": _DEPRECATED},
                "name",
                "version",
                "deprecated",
            ),
            "arguments": obj_or_null,
            "arguments_sha256": _STR_OR_NULL,
            "validation": _OBJ,
            "state_guards": _OBJ,
            "policy": obj_or_null,
            "locks": {"type": "array", "items": lock},
            "preview": _ANY,
            "preview_available": _BOOL,
            "error": _nullable("CallError"),
            "revisions": ref("Revisions"),
        },
        "dry_run",
        "would",
        "tool",
        "validation",
        "policy",
        "locks",
        "error",
    )


def _tool_summary() -> Schema:
    version = _object(
        {"version": _STR, "deprecated": _DEPRECATED, "disabled": _BOOL},
        "version",
        "deprecated",
        "disabled",
    )
    return _object(
        {
            "name": _STR,
            "version": _STR,
            "description": _STR,
            "adapter": _STR,
            "operation": _STR,
            "risk": _enum(Risk),
            "side_effect": _enum(SideEffectKind),
            "reversible": _BOOL,
            "tags": {"type": "array", "items": _STR},
            "idempotency": {"type": "string", "enum": ["required", "optional", "none"]},
            "timeout_s": {"type": "number"},
            "deprecated": _DEPRECATED,
            "versions": {"type": "array", "items": version},
            "links": _object({"self": _STR}, "self"),
        },
        "name",
        "version",
        "description",
        "adapter",
        "operation",
        "risk",
        "side_effect",
        "reversible",
        "tags",
        "idempotency",
        "timeout_s",
        "deprecated",
        "versions",
        "links",
    )


def _tool() -> Schema:
    lock = _object({"key": _STR, "mode": _enum(LockMode)}, "key", "mode")
    llm_tool = _object(
        {"name": _STR, "description": _STR, "parameters": _OBJ}, "name", "description", "parameters"
    )
    return {
        "allOf": [
            ref("ToolSummary"),
            _object(
                {
                    "input_schema": {**_OBJ, "description": "JSON Schema of the arguments"},
                    "output_schema": {
                        "type": ["object", "null"],
                        "description": "JSON Schema of the result's data, when declared",
                    },
                    "locks": {"type": "array", "items": lock},
                    "state_guards": {"type": "array", "items": _STR},
                    "llm_tool": llm_tool,
                },
                "input_schema",
                "output_schema",
                "locks",
                "state_guards",
                "llm_tool",
            ),
        ]
    }


def _approval() -> Schema:
    return _object(
        {
            "id": _STR,
            "execution_id": _STR,
            "run_id": _STR_OR_NULL,
            "call_id": _STR_OR_NULL,
            "status": _enum(ApprovalStatus),
            "tool": _object({"name": _STR, "version": _STR}, "name", "version"),
            "arguments_sha256": _STR,
            "requested_by": _STR,
            "workspace": _STR,
            "reasons": {"type": "array", "items": _STR},
            "arguments": _OBJ,
            "preview": _ANY,
            "requested_at_ms": _INT,
            "expires_at_ms": _INT,
            "decided_by": _STR_OR_NULL,
            "decided_at_ms": _INT_OR_NULL,
            "comment": _STR_OR_NULL,
            "approver_roles": {"type": ["array", "null"], "items": _STR},
        },
        "id",
        "execution_id",
        "run_id",
        "call_id",
        "status",
        "tool",
        "arguments_sha256",
        "requested_by",
        "workspace",
        "reasons",
        "arguments",
        "preview",
        "requested_at_ms",
        "expires_at_ms",
        "decided_by",
        "decided_at_ms",
        "comment",
        "approver_roles",
    )


def _approval_decision() -> Schema:
    return {
        "allOf": [
            ref("Approval"),
            _object(
                {
                    "links": _object({"execution": _STR}, "execution"),
                    "approval_token": {
                        "type": "string",
                        "description": 'approve with "resume": false only',
                    },
                },
                "links",
            ),
        ]
    }
