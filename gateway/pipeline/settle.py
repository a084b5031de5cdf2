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
from gateway.pipeline.probes import run_probes
from gateway.pipeline.records import Flow, ToolResult
from gateway.pipeline.services import Services
from gateway.types import Outcome, Phase, SideEffect

UNCERTAIN = frozenset({"timeout", "adapter_crashed", "cancelled", "interrupted"})
WRITES = (SideEffect.WRITE, SideEffect.EXTERNAL)
NOT_STARTED = frozenset({"deadline_exceeded"})
"""Failure codes of an adapter that refused before it began (with phase ``validate``: an
argument it cannot use): nothing was attempted."""


async def run(services: Services, flow: Flow) -> Flow:
    tool = flow.tool
    assert tool is not None
    queued, running = _timing(flow)
    raw = flow.raw
    if raw is not None:
        result = ToolResult(
            call_id=flow.request.call_id,
            tool_version=str(tool.version),
            outcome=raw.outcome,
            data=raw.data,
            error=raw.error,
            side_effect=raw.side_effect,
            evidence=raw.evidence,
            queued_ms=queued,
            running_ms=running,
            truncated=raw.truncated,
        )
        observed = raw.side_effect.to_json()
        stopped = raw.outcome is Outcome.CANCELLED and raw.side_effect.attempted
        if stopped and tool.side_effect in WRITES:
            flow = flow.emit("tool.side_effect_observed", **observed)
            error = raw.error or ExecutionError("the call was cancelled", code="cancelled")
            return await reconcile(services, flow, result, error, Outcome.CANCELLED)
        return flow.but_emit({"result": result}, "tool.side_effect_observed", **observed)
    base = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(tool.version),
        outcome=Outcome.FAILED,
        queued_ms=queued,
        running_ms=running,
    )
    failure = flow.failure
    assert failure is not None
    if failure.code in UNCERTAIN and tool.side_effect in WRITES:
        absent = Outcome.CANCELLED if failure.code == "cancelled" else Outcome.FAILED
        return await reconcile(services, flow, base, failure, absent)
    outcome = Outcome.CANCELLED if failure.code == "cancelled" else Outcome.FAILED
    if failure.phase is Phase.VALIDATE or failure.code in NOT_STARTED:
        effect = SideEffectReport(False, False, "nothing was attempted")
    else:
        effect = SideEffectReport(tool.side_effect in WRITES, False, "not committed")
    return flow.but(result=replace(base, outcome=outcome, error=failure, side_effect=effect))


async def reconcile(
    services: Services,
    flow: Flow,
    base: ToolResult,
    failure: ToolgateError,
    when_absent: Outcome,
) -> Flow:
    """Learn from the tool's reconcile probes whether the side effect is in place."""
    tool = flow.tool
    assert tool is not None
    unknown = replace(
        base,
        outcome=Outcome.UNKNOWN,
        error=with_retryable(failure, False),  # unknown is never retried automatically
        side_effect=SideEffectReport(True, False, "the side effect may have happened"),
    )
    if not tool.reconcile:
        return flow.but(result=unknown)
    passed, evidence = await run_probes(services, flow, tool.reconcile, "reconcile")
    evidence = (*base.evidence, *evidence)
    if passed is None:
        return flow.but(result=replace(unknown, evidence=evidence))
    if passed:
        effect = SideEffectReport(True, True, "reconciled: the side effect is in place")
        result = replace(base, outcome=Outcome.SUCCEEDED, error=None, side_effect=effect)
    else:
        effect = SideEffectReport(True, False, "reconciled: the side effect did not happen")
        # The probe shows nothing happened: running the call again is safe.
        result = replace(
            base, outcome=when_absent, error=with_retryable(failure, True), side_effect=effect
        )
    return flow.but(result=replace(result, evidence=evidence))


def with_retryable(error: ToolgateError, retryable: bool) -> ToolgateError:
    """A copy of ``error`` that says truthfully whether retrying is safe."""
    if error.retryable == retryable:
        return error
    copy = type(error)(error.message, code=error.code, retryable=retryable, details=error.details)
    return copy


def _timing(flow: Flow) -> tuple[int, int]:
    """(queued_ms, running_ms)."""
    started = flow.started_ms or flow.received_ms
    finished = flow.finished_ms or started
    return max(started - flow.received_ms, 0), finished - started
