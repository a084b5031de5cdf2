"""The execution row of a call (what reserve and commit write), and its idempotency scope."""

from __future__ import annotations

import hashlib
import time

from gateway import jsontext
from gateway.declarations.model import ToolDeclaration
from gateway.pipeline.records import Ticket, ToolExecutionRequest
from gateway.store.records import ExecutionRecord
from gateway.types import Status


def build_record(
    ticket: Ticket,
    tool: ToolDeclaration | None,
    arguments_sha256: str | None,
    status: Status,
    scope: str | None = None,
    *,
    approval_id: str | None = None,
    risk: str | None = None,
    outcome: str | None = None,
    result_json: str | None = None,
    fencing_json: str | None = None,
    owner: str | None = None,
    payload_sha256: str | None = None,
) -> ExecutionRecord:
    """The execution row of the call ``ticket`` stands for (``tool`` and
    ``arguments_sha256`` as far as they are known; ``scope``: its idempotency scope, when
    already computed; the keywords are columns not known from the call)."""
    req = ticket.request
    now = int(time.time() * 1000)
    if scope is None and tool is not None:
        scope = idempotency_scope(req, tool)
    return ExecutionRecord(
        id=ticket.execution_id,
        principal=req.principal,
        agent_id=req.agent_id,
        run_id=req.run_id,
        turn_id=req.turn_id,
        call_id=req.call_id,
        payload_sha256=payload_sha256 or req.payload_sha256,
        workspace_id=req.workspace_id,
        tool_name=tool.name if tool else req.tool_name,
        tool_version=str(tool.version) if tool else None,
        risk=risk,
        status=status,
        outcome=outcome,
        arguments_sha256=arguments_sha256,
        idempotency_scope=scope,
        approval_id=approval_id,
        cancellation_token=req.cancellation_token,
        request_json=jsontext.compact(req.to_json()),
        result_json=result_json,
        fencing_json=fencing_json,
        owner=owner,
        created_ms=ticket.received_ms,
        updated_ms=now,
    )


def idempotency_scope(req: ToolExecutionRequest, tool: ToolDeclaration) -> str | None:
    """sha256 of principal + workspace + tool + key: the key's namespace (docs/api.md#idempotency,
    'Scope')."""
    if not req.idempotency_key or tool.idempotency == "none":
        return None
    raw = "\x1f".join((req.principal, req.workspace_id, tool.name, req.idempotency_key))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()
