"""The one place an execution (or a refused request) becomes an MCP answer.

- a terminal execution → a ``CallToolResult``: ``structuredContent`` is the tool's ``data``
  (an object; other JSON values are wrapped as ``{"value": ...}``), a text block holds the
  same JSON, ``isError`` is true for ``failed`` and ``unknown`` with the agent-facing message,
  and ``_meta`` carries the execution id, outcome, side effect and evidence;
- an execution that waits (for an approval, or still running) → a task for a client that
  declared task support, else a structured, non-error result that says how to get the
  outcome later;
- a request the gateway refused before it became an execution → an ``isError`` result
  naming the code (never a JSON-RPC internal error, never an exception's text);
- any of these for a tool that declares an ``outputSchema`` → ``structuredContent`` only
  when it conforms to it (``within_output_schema``).
"""

from __future__ import annotations

import datetime
from typing import Any

from gateway import jsontext
from gateway.declarations.catalogue import Catalogue
from gateway.errors import NotFound, ToolgateError
from gateway.mcp import meta
from gateway.service.approvals import page_path
from gateway.service.calls import Plan
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import Outcome, Status

ERROR_OUTCOMES = frozenset({Outcome.FAILED.value, Outcome.UNKNOWN.value})
POLL_INTERVAL_MS = 1000
STATUS_TOOL = "toolgate.execution_status"
"""The built-in tool that reports an execution (for clients without task support)."""


NOT_THE_OUTPUT = (
    "not the tool's output: this tool declares an outputSchema, which only the data of a "
    "succeeded call is checked against and published as structuredContent"
)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _object(data: Any) -> dict[str, Any]:
    return data if isinstance(data, dict) else {"value": data}


def approval_page(base_url: str, approval_id: str) -> str:
    """The approvals page where a person decides ``approval_id`` (gateway/ui/routes.py)."""
    return base_url + page_path(approval_id)


def links(record: ExecutionRecord, base_url: str, approval_id: str | None) -> dict[str, str]:
    out = {
        "execution": f"{base_url}/v1/executions/{record.id}",
        "events": f"{base_url}/v1/executions/{record.id}/events",
    }
    if approval_id is not None:
        out["approval_page"] = approval_page(base_url, approval_id)
        out["approval"] = f"{base_url}/v1/approvals/{approval_id}"
        out["approve"] = f"{base_url}/v1/approvals/{approval_id}/approve"
    return out


def _execution_meta(record: ExecutionRecord, base_url: str) -> dict[str, Any]:
    return {
        meta.EXECUTION_ID: record.id,
        meta.STATUS: record.status.value,
        meta.RUN_ID: record.run_id,
        meta.CALL_ID: record.call_id,
        meta.TOOL_VERSION: record.tool_version,
        meta.LINKS: links(record, base_url, record.approval_id),
    }


def call_result(record: ExecutionRecord, base_url: str) -> dict[str, Any]:
    """A terminal execution as a ``CallToolResult``."""
    return call_result_and_text(record, base_url)[0]


def call_result_and_text(
    record: ExecutionRecord, base_url: str
) -> tuple[dict[str, Any], str | None]:
    """``call_result``, and the JSON text of its ``structuredContent`` (``jsontext.response``)
    when one of its text blocks is that very string (None when none is): what writes the
    answer need not encode the same value again."""
    result = record.result or {}
    outcome = str(result.get("outcome") or record.outcome)
    error = result.get("error")
    out_meta = _execution_meta(record, base_url)
    out_meta.update(
        {
            meta.OUTCOME: outcome,
            meta.SIDE_EFFECT: result.get("side_effect"),
            meta.EVIDENCE: result.get("evidence") or [],
            meta.ERROR: error,
        }
    )
    data = result.get("data")
    out: dict[str, Any] = {"content": [], "isError": outcome in ERROR_OUTCOMES, "_meta": out_meta}
    text: str | None = None
    if outcome in ERROR_OUTCOMES:
        message = (error or {}).get("message") or f"the call ended {outcome}"
        out["content"].append(_text(f"{outcome}: {message}"))
    if data is not None:
        structured = _object(data)
        out["structuredContent"] = structured
        text = jsontext.response(structured)
        out["content"].append(_text(text))
    elif outcome not in ERROR_OUTCOMES:
        out["structuredContent"] = {}
        out["content"].append(_text("{}"))
    if outcome not in ERROR_OUTCOMES and error:
        out["content"].append(_text(f"{outcome}: {error.get('message')}"))
    return out, text


def answer(
    record: ExecutionRecord,
    approval: ApprovalRecord | None,
    base_url: str,
    catalogue: Catalogue,
) -> tuple[dict[str, Any], str | None]:
    """The one answer to a ``tools/call`` about ``record``, whichever path serves it (the
    SDK's, gateway/mcp/stateless.py): its result if it ended, else how to learn it later
    (``approval``: the one it waits for), held to the tool's ``outputSchema``; and the JSON
    text of its ``structuredContent`` when a text block is that very string and the answer
    still carries it (what writes the answer need not encode it again), else None."""
    if record.terminal:
        out, text = call_result_and_text(record, base_url)
    else:
        out, text = pending_result(record, approval, base_url), None
    held = within_output_schema(out, catalogue, record.tool_name)
    return held, (text if "structuredContent" in held else None)


def plan_result(plan: Plan) -> dict[str, Any]:
    """A dry run's answer: the plan (docs/api.md#post-v1plans) as ``structuredContent``; not
    an error even when the call would fail (the plan says so in ``would`` and ``error``)."""
    structured = plan.to_json()
    return {
        "content": [_text(jsontext.response(structured))],
        "structuredContent": structured,
        "isError": False,
        "_meta": {meta.DRY_RUN: True, meta.OUTCOME: "planned", meta.TOOL_VERSION: plan.version},
    }


def refused(exc: ToolgateError) -> dict[str, Any]:
    """A request refused before it became an execution (400/403/409/422 at the REST door),
    worded for MCP (``meta.phrased``)."""
    exc = meta.phrased(exc)
    return {
        "content": [_text(f"refused ({exc.code}): {exc.message}")],
        "isError": True,
        "_meta": {meta.ERROR: exc.to_json(), meta.OUTCOME: "refused"},
    }


def not_found(execution_id: str) -> dict[str, Any]:
    """The status tool asked about an execution the caller may not see: unknown, or another
    principal's (the answer is the same: it tells nothing of others' calls)."""
    return refused(NotFound(f"no execution {execution_id!r} you may see", code="not_found"))


def internal(what: str) -> dict[str, Any]:
    return {
        "content": [_text(f"the gateway failed to answer ({what}); see its log")],
        "isError": True,
        "_meta": {meta.ERROR: {"type": "internal", "message": what}, meta.OUTCOME: "refused"},
    }


def _approval_json(approval: ApprovalRecord | None, base_url: str) -> Any:
    if approval is None:
        return None
    return {
        "id": approval.id,
        "page": approval_page(base_url, approval.id),
        "status": approval.status,
        "expires_at_ms": approval.expires_ms,
        "reasons": list(approval.reasons),
        "approver_decides_with": f"toolgate approvals approve {approval.id}",
    }


def waiting_message(record: ExecutionRecord, approval: ApprovalRecord | None, base_url: str) -> str:
    if record.status is Status.AWAITING_APPROVAL and approval is not None:
        reasons = "; ".join(approval.reasons) or "the policy asks for it"
        return (
            f"awaiting approval {approval.id} ({reasons}); an approver decides it on the page "
            f"{approval_page(base_url, approval.id)} (or over the API at "
            f"{base_url}/v1/approvals/{approval.id}: POST .../approve or .../deny, or "
            f"`toolgate approvals approve {approval.id}`); the gateway then runs the call"
        )
    if record.status is Status.CANCELLING:
        return f"execution {record.id} is being cancelled"
    return f"execution {record.id} is {record.status.value}"


def pending_result(
    record: ExecutionRecord, approval: ApprovalRecord | None, base_url: str
) -> dict[str, Any]:
    """An execution that has not finished, for a client without task support: not an error,
    and it says how to learn the outcome later."""
    message = waiting_message(record, approval, base_url)
    later = (
        f"to get the outcome, call the same tool again with the same arguments and _meta "
        f'{{"{meta.RUN_ID}": "{record.run_id}", "{meta.CALL_ID}": "{record.call_id}"}} '
        f"(or the same {meta.IDEMPOTENCY_KEY}), or call {STATUS_TOOL} with "
        f'{{"execution_id": "{record.id}"}}'
    )
    structured = {
        "status": record.status.value,
        "execution_id": record.id,
        "run_id": record.run_id,
        "call_id": record.call_id,
        "approval": _approval_json(approval, base_url),
        "message": message,
        "how_to_get_the_outcome": later,
        "links": links(record, base_url, record.approval_id),
    }
    return {
        "content": [_text(f"{message}. {later}."), _text(jsontext.response(structured))],
        "structuredContent": structured,
        "isError": False,
        "_meta": {**_execution_meta(record, base_url), meta.APPROVAL: structured["approval"]},
    }


def _iso(ms: int) -> str:
    return (
        datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def task(record: ExecutionRecord, approval: ApprovalRecord | None, base_url: str) -> dict[str, Any]:
    """The execution as an MCP ``Task`` (its id is the execution id: any replica answers)."""
    if not record.terminal:
        status = "working"
        message = waiting_message(record, approval, base_url)
    elif record.outcome == Outcome.CANCELLED.value:
        status, message = "cancelled", f"execution {record.id} was cancelled"
    else:
        status, message = "completed", f"execution {record.id} ended {record.outcome}"
    return {
        "taskId": record.id,
        "status": status,
        "statusMessage": message,
        "createdAt": _iso(record.created_ms),
        "lastUpdatedAt": _iso(record.updated_ms),
        "ttl": None,
        "pollInterval": POLL_INTERVAL_MS,
    }


def related(record: ExecutionRecord) -> dict[str, Any]:
    return {"io.modelcontextprotocol/related-task": {"taskId": record.id}}


def within_output_schema(out: dict[str, Any], catalogue: Catalogue, name: str) -> dict[str, Any]:
    """``out`` held to the ``outputSchema`` ``tools/list`` gives ``name`` (its newest enabled
    version's ``output:``), which MCP requires every non-error result's ``structuredContent``
    to meet.

    ``structuredContent`` is kept only when it meets it: checked here, with the validator
    the verify stage used (a succeeded call's data was checked there too, against the
    version it ran). Any other answer (a plan, a call still waiting, data of another shape)
    keeps its JSON in a text block and ``_meta`` but loses ``structuredContent``, and one
    that was not an error becomes one, saying why: a client that validates never meets
    data that does not conform.
    """
    listed = next((t for t in catalogue.versions(name) if not t.disabled), None)
    validator = catalogue.output_validator(listed) if listed is not None else None
    if validator is None:
        return out
    structured = out.get("structuredContent")
    if type(structured) is dict and validator.validate(structured):
        return out
    out.pop("structuredContent", None)
    if not out.get("isError"):
        out["isError"] = True
        out["content"].insert(0, _text(NOT_THE_OUTPUT))
    return out
