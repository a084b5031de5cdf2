"""Helpers every stage shares: the template context and the adapter call of a flow."""

from __future__ import annotations

import time
from typing import Any

import anyio

from gateway import tracecontext
from gateway.adapters.base import Adapter, AdapterCall
from gateway.pipeline.records import Flow
from gateway.pipeline.services import Services


def template_context(flow: Flow) -> dict[str, Any]:
    """What ``{dotted.path}`` templates in a declaration can see."""
    req = flow.request
    tool = flow.tool
    return {
        "arguments": dict(flow.arguments or {}),
        "workspace": flow.workspace.to_json() if flow.workspace else {},
        "actor": {"user_id": req.principal, "agent_id": req.agent_id},
        "request": {
            "run_id": req.run_id,
            "turn_id": req.turn_id,
            "call_id": req.call_id,
            "idempotency_key": req.idempotency_key or "",
        },
        "tool": {"name": tool.name, "version": str(tool.version)} if tool else {},
        "execution": {"id": flow.execution_id},
    }


def deadline_of(services: Services, flow: Flow) -> float:
    """Epoch seconds: the request's deadline, capped by the tool's timeout from now.

    Computed when asked: waiting for locks and running the adapter are each bounded by the
    tool's ``timeout`` (and both by the request's deadline)."""
    assert flow.tool is not None
    cap = time.time() + flow.tool.timeout
    if flow.request.deadline_ms is None:
        return cap
    return min(cap, flow.request.deadline_ms / 1000.0)


def adapter_of(services: Services, flow: Flow) -> Adapter:
    assert flow.tool is not None
    return services.adapters[flow.tool.adapter]


def adapter_call(
    services: Services, flow: Flow, cancelled: anyio.Event | None = None, **hooks: Any
) -> AdapterCall:
    """The uniform call every adapter gets; ``hooks`` are AdapterCall's callbacks
    (``emit_output``, ``checkpoint``)."""
    assert flow.tool is not None and flow.workspace is not None
    return AdapterCall(
        execution_id=flow.execution_id,
        tool=flow.tool,
        arguments=flow.arguments or {},
        workspace=flow.workspace,
        paths=flow.paths,
        deadline=deadline_of(services, flow),
        cancelled=cancelled or anyio.Event(),
        fencing_tokens=flow.fencing,
        output_budget=flow.tool.output_budget,
        context=template_context(flow),
        traceparent=tracecontext.child(flow.request.traceparent),
        **hooks,
    )
