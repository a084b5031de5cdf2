"""Stage 8 — normalise the result: adapter output or failure → a stable ToolResult.

A write whose fate is not known (timeout, adapter crash) is reconciled by the tool's
reconcile probes; without them it is ``unknown``, never retried behind the caller's back.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.adapters.base import SideEffectReport
from gateway.errors import ToolgateError
from gateway.pipeline.probes import run_probes
from gateway.pipeline.records import Flow, ToolResult
from gateway.pipeline.services import Services
from gateway.types import Outcome, SideEffect

_UNCERTAIN = frozenset({"timeout", "adapter_crashed"})
_WRITES = (SideEffect.WRITE, SideEffect.EXTERNAL)


async def run(services: Services, flow: Flow) -> Flow:
    tool = flow.tool
    assert tool is not None
    timing = _timing(flow)
    if flow.raw is not None:
        raw = flow.raw
        result = ToolResult(
            call_id=flow.request.call_id,
            tool_version=str(tool.version),
            outcome=raw.outcome,
            data=raw.data,
            error=raw.error,
            side_effect=raw.side_effect,
            evidence=raw.evidence,
            truncated=raw.truncated,
            queued_ms=timing[0],
            running_ms=timing[1],
        )
        flow = flow.emit("tool.side_effect_observed", **raw.side_effect.to_json())
        return flow.but(result=result)
    failure = flow.failure
    assert failure is not None
    if failure.code in _UNCERTAIN and tool.side_effect in _WRITES:
        return await _reconcile(services, flow, failure, timing)
    result = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(tool.version),
        outcome=Outcome.FAILED,
        error=failure,
        side_effect=SideEffectReport(tool.side_effect in _WRITES, False, "not committed"),
        queued_ms=timing[0],
        running_ms=timing[1],
    )
    return flow.but(result=result)


async def _reconcile(
    services: Services, flow: Flow, failure: ToolgateError, timing: tuple[int, int]
) -> Flow:
    tool = flow.tool
    assert tool is not None
    base = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(tool.version),
        outcome=Outcome.UNKNOWN,
        error=failure,
        side_effect=SideEffectReport(True, False, "the side effect may have happened"),
        queued_ms=timing[0],
        running_ms=timing[1],
    )
    if not tool.reconcile:
        return flow.but(result=base)
    passed, evidence = await run_probes(services, flow, tool.reconcile, "reconcile")
    if passed is None:
        return flow.but(result=replace(base, evidence=evidence))
    if passed:
        summary = "reconciled: the side effect is in place"
        outcome, committed, error = Outcome.SUCCEEDED, True, None
    else:
        summary = "reconciled: the side effect did not happen"
        outcome, committed, error = Outcome.FAILED, False, failure
    result = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(tool.version),
        outcome=outcome,
        error=error,
        side_effect=SideEffectReport(True, committed, summary),
        evidence=evidence,
        queued_ms=timing[0],
        running_ms=timing[1],
    )
    return flow.but(result=result)


def _timing(flow: Flow) -> tuple[int, int]:
    """(queued_ms, running_ms)."""
    started = flow.started_ms or flow.received_ms
    finished = flow.finished_ms or started
    return max(started - flow.received_ms, 0), finished - started
