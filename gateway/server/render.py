"""Execution and tool resources as the API shows them."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.responses import JSONResponse, Response

from gateway import jsontext
from gateway.declarations import definitions
from gateway.declarations.jsonschema import cerberus_to_json_schema
from gateway.declarations.model import ToolDeclaration
from gateway.events.model import Event
from gateway.service.approvals import page_path
from gateway.store.records import ApprovalRecord, ExecutionRecord


def encoded_json(body: bytes, status_code: int = 200) -> Response:
    """A response of JSON already encoded (``execution_json``), as ``JSONResponse`` sends
    it: the same two headers."""
    return Response(body, status_code, media_type=JSONResponse.media_type)


def run_events(run_id: str, events: list[Event], cursor: str | None, more: bool) -> dict[str, Any]:
    """A page of a run's events: ``cursor`` (None before any event) resumes after it, as
    ``?after=`` or a stream's ``Last-Event-ID``; ``next`` links the page after it while more
    remain (None once the page ends the run's events for now)."""
    link = None
    if more and cursor is not None:
        link = f"/v1/runs/{quote(run_id, safe='')}/events?after={quote(cursor, safe=':,')}"
    items = [event.to_json() for event in events]
    return {"run_id": run_id, "items": items, "cursor": cursor, "next": link}


def execution_events(execution_id: str, events: list[Event], more: bool) -> dict[str, Any]:
    """A page of an execution's events: ``next`` links the page after it (``?after=`` its
    last ``seq``) while more remain, None once the page ends the log for now."""
    link = f"/v1/executions/{execution_id}/events?after={events[-1].seq}" if more else None
    return {"execution_id": execution_id, "items": [e.to_json() for e in events], "next": link}


def execution(record: ExecutionRecord, approval: ApprovalRecord | None = None) -> dict[str, Any]:
    head, tail = _execution_parts(record, approval)
    return {**head, "result": record.result, **tail}


def execution_json(record: ExecutionRecord, approval: ApprovalRecord | None = None) -> bytes:
    """``execution(record, approval)`` encoded as JSONResponse encodes it, byte for byte.

    The stored result is spliced in as it is rather than parsed and encoded again (most of
    the work for a read's result) when that gives the same bytes: when it holds no ``\\u``
    escape (it is stored ASCII-only; a response writes non-ASCII as UTF-8) and no NaN or
    Infinity (a response refuses them). Otherwise the body is encoded the usual way."""
    stored = record.result_json
    if stored is not None and ("\\u" in stored or "NaN" in stored or "Infinity" in stored):
        return jsontext.response(execution(record, approval)).encode("utf-8")
    head, tail = _execution_parts(record, approval)
    text = jsontext.response({**head, "result": None, **tail})
    if stored is None:
        return text.encode("utf-8")
    # The first ',"result":null,' is the top-level key: the keys before it are fixed, and
    # in an encoded string every '"' follows a backslash, so ',"' occurs in none.
    at = text.index(_NO_RESULT) + len(_NO_RESULT) - 5
    return "".join((text[:at], stored, text[at + 4 :])).encode("utf-8")


_NO_RESULT = ',"result":null,'


def _execution_parts(
    record: ExecutionRecord, approval: ApprovalRecord | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keys of an execution body before ``result``, and those after it."""
    links = {
        "self": f"/v1/executions/{record.id}",
        "events": f"/v1/executions/{record.id}/events",
    }
    head: dict[str, Any] = {
        "id": record.id,
        "run_id": record.run_id,
        "turn_id": record.turn_id,
        "call_id": record.call_id,
        "status": record.status.value,
        "tool": {"name": record.tool_name, "version": record.tool_version},
        "actor": {"user_id": record.principal, "agent_id": record.agent_id},
        "workspace": {"id": record.workspace_id},
    }
    tail: dict[str, Any] = {
        "approval": None,
        "created_at_ms": record.created_ms,
        "updated_at_ms": record.updated_ms,
        "links": links,
    }
    if approval is not None:
        page = page_path(approval.id)
        tail["approval"] = {
            "id": approval.id,
            "page": page,
            "status": approval.status,
            "expires_at_ms": approval.expires_ms,
            "reasons": list(approval.reasons),
        }
        links["approval"] = f"/v1/approvals/{approval.id}"
        links["approval_page"] = page
    return head, tail


def tool_summary(tool: ToolDeclaration, versions: list[ToolDeclaration]) -> dict[str, Any]:
    out = tool.summary()
    out["versions"] = [
        {"version": str(v.version), "deprecated": v.deprecated, "disabled": v.disabled}
        for v in versions
    ]
    out["links"] = {"self": f"/v1/tools/{tool.name}"}
    return out


def tool_detail(tool: ToolDeclaration, versions: list[ToolDeclaration]) -> dict[str, Any]:
    schema = cerberus_to_json_schema(tool.input, purge_readonly=True)
    out = tool_summary(tool, versions)
    out["input_schema"] = schema
    out["output_schema"] = definitions.output_schema(tool)
    out["locks"] = [{"key": lock.key.source, "mode": lock.mode.value} for lock in tool.locks]
    out["state_guards"] = [g.expected for g in tool.state_guards]
    out["llm_tool"] = definitions.llm_tool(tool, schema)
    return out
