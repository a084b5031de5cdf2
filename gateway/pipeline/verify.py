"""Stage 9 — evidence & verification: an independent read-after-write of the side effect."""

from __future__ import annotations

from dataclasses import replace

from gateway.errors import VerificationError
from gateway.pipeline.probes import run_probes
from gateway.pipeline.records import Settled
from gateway.pipeline.services import Services
from gateway.types import Outcome


async def run(services: Services, state: Settled) -> Settled:
    call, result = state.ran, state.result
    if call is None:
        return state  # the adapter returned nothing: nothing to verify
    tool = call.tool
    if result.outcome is not Outcome.SUCCEEDED or not tool.verify:
        return state
    passed, evidence = await run_probes(services, call, tool.verify, "verify", state.fencing)
    result = replace(result, evidence=(*result.evidence, *evidence))
    trail = state.trail.emit("tool.verified", passed=passed)
    if passed:
        return replace(state, result=result, trail=trail)
    why = "could not be read back" if passed is None else "was not found as expected"
    error = VerificationError(
        f"the side effect of {tool.ref} {why} after the adapter reported success; "
        "inspect the evidence before retrying",
        code="verification_failed" if passed is False else "verification_unavailable",
    )
    outcome = Outcome.FAILED if passed is False else Outcome.UNKNOWN
    return replace(state, result=replace(result, outcome=outcome, error=error), trail=trail)
