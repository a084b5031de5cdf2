"""Helpers every stage shares: the template context and the adapter call of a call."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anyio

from gateway import tracecontext
from gateway.adapters.base import Adapter, AdapterCall
from gateway.pipeline.records import NO_LOCKS, Call
from gateway.pipeline.services import Services


def template_context(call: Call) -> Mapping[str, Any]:
    """What ``{dotted.path}`` templates in a declaration can see: made once a call (kept on
    it), and read only (templates render from it, adapters read it)."""
    found = call.templating
    if found is None:
        found = _template_context(call)
        object.__setattr__(call, "templating", found)
    return found


def _template_context(call: Call) -> dict[str, Any]:
    req = call.ticket.request
    tool = call.tool
    return {
        "arguments": dict(call.arguments),
        "workspace": call.workspace.to_json(),
        "actor": {"user_id": req.principal, "agent_id": req.agent_id},
        "request": {
            "run_id": req.run_id,
            "turn_id": req.turn_id,
            "call_id": req.call_id,
            "idempotency_key": req.idempotency_key or "",
        },
        "tool": {"name": tool.name, "version": str(tool.version)},
        "execution": {"id": call.ticket.execution_id},
    }


def deadline_of(services: Services, call: Call) -> float:
    """Epoch seconds: the request's deadline, capped by the tool's timeout from now.

    Computed when asked: waiting for locks and running the adapter are each bounded by the
    tool's ``timeout`` (and both by the request's deadline)."""
    cap = time.time() + call.tool.timeout
    deadline_ms = call.ticket.request.deadline_ms
    if deadline_ms is None:
        return cap
    return min(cap, deadline_ms / 1000.0)


def adapter_of(services: Services, call: Call) -> Adapter:
    return services.adapters[call.tool.adapter]


def adapter_call(
    services: Services,
    call: Call,
    fencing: Mapping[str, int] = NO_LOCKS,
    cancelled: anyio.Event | None = None,
    **hooks: Any,
) -> AdapterCall:
    """The uniform call every adapter gets, holding the ``fencing`` tokens of its locks;
    ``hooks`` are AdapterCall's callbacks (``emit_output``, ``checkpoint``)."""
    return AdapterCall(
        execution_id=call.ticket.execution_id,
        tool=call.tool,
        arguments=call.arguments,
        workspace=call.workspace,
        paths=call.paths,
        deadline=deadline_of(services, call),
        cancelled=cancelled or anyio.Event(),
        fencing_tokens=fencing,
        output_budget=call.tool.output_budget,
        context=template_context(call),
        traceparent=_upstream_traceparent(services, call),
        **hooks,
    )


def _upstream_traceparent(services: Services, call: Call) -> str:
    """What an adapter call sends upstream: the execution's span when tracing is on (the
    upstream's spans then sit under it), else a child of the request's trace context."""
    tracing = services.telemetry.tracing
    if tracing is not None and (own := tracing.traceparent()) is not None:
        return own
    return tracecontext.child(call.request.traceparent)
