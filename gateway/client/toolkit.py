"""What every framework adapter shares: the catalogue as tool specs, and an execution as
the answer an agent reads (the framework modules only wrap these)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.client.client import AsyncClient, CallOptions, Client, Execution
from gateway.client.errors import ApiError
from gateway.client.keys import call_key


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One catalogue tool as a framework takes it."""

    name: str
    """The gateway's name (``fs.write_file``)."""
    llm_name: str
    """The name LLM APIs accept (``fs__write_file``)."""
    description: str
    parameters: Mapping[str, Any]
    """The input as JSON Schema (``GET /v1/tools?format=llm``)."""


def specs_of(listing: Mapping[str, Any]) -> list[ToolSpec]:
    """The tools of a ``GET /v1/tools?format=llm`` answer."""
    names: Mapping[str, str] = listing.get("names") or {}
    return [
        ToolSpec(
            name=names.get(item["name"], item["name"]),
            llm_name=item["name"],
            description=item.get("description") or "",
            parameters=item.get("parameters") or {"type": "object", "properties": {}},
        )
        for item in listing.get("items", [])
    ]


def catalogue(client: Client) -> list[ToolSpec]:
    return specs_of(client.tools(format="llm"))


async def acatalogue(client: AsyncClient) -> list[ToolSpec]:
    return specs_of(await client.tools(format="llm"))


def with_call_id(options: CallOptions, call_id: str | None) -> CallOptions:
    """The options of one tool invocation: the framework's tool call id as the gateway's
    call id (a retry of that tool call is then the same call; an invocation without one is
    a new call), and, unless the options name one, an idempotency key derived from it
    (``keys.call_key``: ``<run_id>/<call id>``, or its digest when that is too long, as the
    MCP door derives one; what a tool with ``idempotency: required`` needs, and never the
    same for two invocations)."""
    call_id = call_id or f"call-{uuid.uuid4().hex}"
    key = options.idempotency_key
    if key is None:  # a key the options give is sent as given (an empty one is refused)
        key = call_key(options.run_id, call_id)
    return replace(options, call_id=call_id, idempotency_key=key)


def answer(execution: Execution) -> dict[str, Any]:
    """What the agent reads of an execution: the data of a success, the error of a failure,
    how to get the outcome of a call that waits for a person."""
    if execution.terminal:
        out: dict[str, Any] = {"outcome": execution.outcome, "execution_id": execution.id}
        if execution.succeeded:
            out["data"] = execution.data
        else:
            out["error"] = execution.error
        return out
    approval = execution.approval or {}
    return {
        "status": execution.status,
        "execution_id": execution.id,
        "approval_id": approval.get("id"),
        "approval_page": approval.get("page"),
        "message": (
            "the call waits for a person's approval; it runs once approved (ask for "
            "execution_id's outcome later)"
            if approval
            else f"the call is {execution.status}; ask for execution_id's outcome later"
        ),
    }


def pending_approval(execution: Execution) -> Mapping[str, Any] | None:
    """The approval an execution waits for while nobody has decided it; ``None`` once it is
    decided (the call then runs, or ran, or ended) or when the call waits for none."""
    approval = execution.approval
    if execution.terminal or not approval or approval.get("status") != "pending":
        return None
    return approval


def review(approval: Mapping[str, Any]) -> str:
    """What a person reads about a parked call: why the gateway asks, and where it asks."""
    reasons = "; ".join(approval.get("reasons") or []) or "the gateway's policy asks a person"
    return f"{reasons} (approval {approval.get('id')}: {approval.get('page')})"


def refused(exc: ApiError) -> dict[str, Any]:
    """A request the gateway refused (4xx): what the agent reads instead of an exception,
    naming what every door names: the code, ``retryable`` and the problem's other fields
    (the ``execution_id`` a conflict is about, the ``errors`` of a bad field, ...)."""
    error = {"code": exc.code, "retryable": exc.retryable, "message": exc.detail}
    return {"outcome": "refused", "error": {**error, **exc.details}}


def text(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
