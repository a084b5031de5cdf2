"""Stage 9 — evidence & verification: an independent read-after-write of the side effect."""

from __future__ import annotations

from dataclasses import replace

from gateway.errors import VerificationError
from gateway.pipeline.probes import run_probes
from gateway.pipeline.records import Flow
from gateway.pipeline.services import Services
from gateway.types import Outcome


async def run(services: Services, flow: Flow) -> Flow:
    result, tool = flow.result, flow.tool
    if result is None or tool is None or flow.raw is None:
        return flow  # nothing was executed: nothing to verify
    if result.outcome is not Outcome.SUCCEEDED or not tool.verify:
        return flow
    passed, evidence = await run_probes(services, flow, tool.verify, "verify")
    result = replace(result, evidence=(*result.evidence, *evidence))
    if passed:
        return flow.but_emit({"result": result}, "tool.verified", passed=passed)
    flow = flow.emit("tool.verified", passed=passed)
    why = "could not be read back" if passed is None else "was not found as expected"
    error = VerificationError(
        f"the side effect of {tool.ref} {why} after the adapter reported success; "
        "inspect the evidence before retrying",
        code="verification_failed" if passed is False else "verification_unavailable",
    )
    outcome = Outcome.FAILED if passed is False else Outcome.UNKNOWN
    return flow.but(result=replace(result, outcome=outcome, error=error))
