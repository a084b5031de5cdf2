"""Submitting, planning and cancelling calls: the same for every door.

A call holds one of its principal's execution slots (``admission.executions``) while it
runs, whichever door sent it; a queued call (``Prefer: respond-async``) is bounded by the
queue instead, and a worker holds the slot when it runs it.
"""

from __future__ import annotations

from gateway.errors import Forbidden
from gateway.pipeline.plan import Plan, plan_call
from gateway.pipeline.records import ToolExecutionRequest
from gateway.pipeline.runner import run_call
from gateway.runtime import admission, cancellation
from gateway.runtime.container import Runtime
from gateway.store.records import ExecutionRecord

__all__ = [
    "Plan",
    "cancel",
    "cancel_by_token",
    "find_call",
    "plan",
    "resolve_unknown",
    "run_holding",
    "submit",
]


async def submit(
    services: Runtime, call: ToolExecutionRequest, *, queued: bool = False
) -> ExecutionRecord:
    """Run ``call`` to its end (or to a person's approval); with ``queued``, only reserve it
    for a worker, bounded by the principal's share of the queue."""
    if queued:
        metrics = services.telemetry.metrics
        await admission.check_queued(services.store, services.settings, call.principal, metrics)
        return await run_call(services, call, respond_async=True)
    with services.admission.executions.hold(call.principal):
        return await run_call(services, call)


async def run_holding(services: Runtime, call: ToolExecutionRequest) -> ExecutionRecord:
    """Run ``call`` whose door took its principal's execution slot already
    (``admission.executions.take``, so that a refusal comes before the call is started
    elsewhere) and gives it back when this returns."""
    return await run_call(services, call)


async def plan(services: Runtime, call: ToolExecutionRequest) -> Plan:
    """What submitting ``call`` would do, with no side effect."""
    with services.admission.executions.hold(call.principal):
        return await plan_call(services, call)


async def find_call(services: Runtime, call: ToolExecutionRequest) -> ExecutionRecord | None:
    """The execution of ``call`` (its principal, run id and call id), once reserved."""
    found = await services.store.find_executions(call.principal, call.run_id, call.call_id)
    return found[0] if found else None


async def cancel(services: Runtime, principal: str, record: ExecutionRecord) -> ExecutionRecord:
    """Ask ``record`` to stop (``Conflict`` when it has ended); its state after the ask."""
    return await cancellation.cancel(services, record, principal)


async def cancel_by_token(services: Runtime, principal: str, token: str) -> list[ExecutionRecord]:
    """Cancel every unfinished execution of ``principal`` that carries ``token``."""
    records = await services.store.find_by_cancellation_token(principal, token)
    return [await cancellation.cancel(services, record, principal) for record in records]


async def resolve_unknown(
    services: Runtime, principal: str, record: ExecutionRecord, outcome: str, note: str
) -> ExecutionRecord:
    """An approver's verdict on an ``unknown`` outcome, recorded as an event."""
    if not services.policy_data.may_list_approvals(principal):
        raise Forbidden("only approvers may resolve an unknown outcome", code="not_an_approver")
    return await cancellation.resolve_unknown(services, record, principal, outcome, note)
