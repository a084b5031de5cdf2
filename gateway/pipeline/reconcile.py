"""Reconciling a write whose fate is not known: its ``reconcile`` probes say whether the side
effect is in place (stage ``result``, and the runner's catch-all)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gateway.adapters.base import SideEffectReport
from gateway.errors import ToolgateError
from gateway.pipeline.probes import run_probes
from gateway.pipeline.records import NO_LOCKS, Call, ToolResult
from gateway.pipeline.services import Services
from gateway.types import Outcome, SideEffect

WRITES = (SideEffect.WRITE, SideEffect.EXTERNAL)


async def reconcile(
    services: Services,
    call: Call,
    base: ToolResult,
    failure: ToolgateError,
    when_absent: Outcome,
    fencing: Mapping[str, int] = NO_LOCKS,
) -> ToolResult:
    """Learn from the tool's reconcile probes whether the side effect is in place."""
    tool = call.tool
    unknown = replace(
        base,
        outcome=Outcome.UNKNOWN,
        error=with_retryable(failure, False),  # unknown is never retried automatically
        side_effect=SideEffectReport(True, False, "the side effect may have happened"),
    )
    if not tool.reconcile:
        return unknown
    passed, evidence = await run_probes(services, call, tool.reconcile, "reconcile", fencing)
    evidence = (*base.evidence, *evidence)
    if passed is None:
        return replace(unknown, evidence=evidence)
    if passed:
        effect = SideEffectReport(True, True, "reconciled: the side effect is in place")
        result = replace(base, outcome=Outcome.SUCCEEDED, error=None, side_effect=effect)
    else:
        effect = SideEffectReport(True, False, "reconciled: the side effect did not happen")
        # The probe shows nothing happened: running the call again is safe.
        result = replace(
            base, outcome=when_absent, error=with_retryable(failure, True), side_effect=effect
        )
    return replace(result, evidence=evidence)


def with_retryable(error: ToolgateError, retryable: bool) -> ToolgateError:
    """A copy of ``error`` that says truthfully whether retrying is safe."""
    if error.retryable == retryable:
        return error
    copy = type(error)(error.message, code=error.code, retryable=retryable, details=error.details)
    return copy
