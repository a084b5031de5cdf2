"""Stage 8 — normalise the result: adapter output or failure → a stable ToolResult.

A write whose fate is not known (timeout, adapter crash, a cancel that cut it off, an
adapter that stopped half-way on cancel) is reconciled by the tool's ``reconcile`` probes:
in place → succeeded; absent → failed (or cancelled, for a cancel); no probes or no
answer → ``unknown``, never retried behind the caller's back.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.adapters.base import SideEffectReport
from gateway.errors import ExecutionError, ToolgateError
from gateway.pipeline.outcomes import settled
from gateway.pipeline.reconcile import WRITES, reconcile
from gateway.pipeline.records import Executed, Settled, ToolResult
from gateway.pipeline.services import Services
from gateway.types import Outcome, Phase

UNCERTAIN = frozenset({"timeout", "adapter_crashed", "cancelled", "interrupted"})
NOT_STARTED = frozenset({"deadline_exceeded"})
"""Failure codes of an adapter that refused before it began (with phase ``validate``: an
argument it cannot use): nothing was attempted."""


async def run(services: Services, state: Executed) -> Settled:
    call = state.call
    tool = call.tool
    queued = max(state.started_ms - call.ticket.received_ms, 0)
    running = state.finished_ms - state.started_ms
    returned = state.returned
    if not isinstance(returned, ToolgateError):
        result = ToolResult(
            call_id=call.ticket.request.call_id,
            tool_version=str(tool.version),
            outcome=returned.outcome,
            data=returned.data,
            error=returned.error,
            side_effect=returned.side_effect,
            evidence=returned.evidence,
            queued_ms=queued,
            running_ms=running,
            truncated=returned.truncated,
        )
        trail = state.trail.emit("tool.side_effect_observed", **returned.side_effect.to_json())
        stopped = returned.outcome is Outcome.CANCELLED and returned.side_effect.attempted
        if stopped and tool.side_effect in WRITES:
            error = returned.error or ExecutionError("the call was cancelled", code="cancelled")
            result = await reconcile(
                services, call, result, error, Outcome.CANCELLED, state.fencing
            )
        return settled(state, result, trail)
    base = ToolResult(
        call_id=call.ticket.request.call_id,
        tool_version=str(tool.version),
        outcome=Outcome.FAILED,
        queued_ms=queued,
        running_ms=running,
    )
    failure = returned
    if failure.code in UNCERTAIN and tool.side_effect in WRITES:
        absent = Outcome.CANCELLED if failure.code == "cancelled" else Outcome.FAILED
        result = await reconcile(services, call, base, failure, absent, state.fencing)
        return settled(state, result)
    outcome = Outcome.CANCELLED if failure.code == "cancelled" else Outcome.FAILED
    if failure.phase is Phase.VALIDATE or failure.code in NOT_STARTED:
        effect = SideEffectReport(False, False, "nothing was attempted")
    else:
        effect = SideEffectReport(tool.side_effect in WRITES, False, "not committed")
    return settled(state, replace(base, outcome=outcome, error=failure, side_effect=effect))
