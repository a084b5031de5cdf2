"""Stage 9 — evidence & verification: an independent read-after-write of the side effect,
then the result's ``data`` against the tool's declared ``output:`` contract."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

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
    if result.outcome is not Outcome.SUCCEEDED:
        return state
    if tool.verify:
        state = await _probe(services, state)
    return check_output(services, state)


async def _probe(services: Services, state: Settled) -> Settled:
    call, result = state.ran, state.result
    assert call is not None
    tool = call.tool
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


def check_output(services: Services, state: Settled) -> Settled:
    """A success whose ``data`` breaks the tool's ``output:`` ends ``failed`` here
    (``output_mismatch``): its data, side effect and evidence are kept as the adapter
    reported them, so nothing is lost and nothing is published as conforming."""
    call, result = state.ran, state.result
    if call is None or result.outcome is not Outcome.SUCCEEDED:
        return state
    validator = services.catalogue.output_validator(call.tool)
    if validator is None:
        return state
    data = result.data
    if type(data) is dict and validator.validate(data):
        return state
    errors: Any = validator.errors if type(data) is dict else {"(data)": ["must be an object"]}
    more = " (and more)" if type(data) is dict and validator.errors_truncated else ""
    error = VerificationError(
        f"{call.tool.ref} returned data that does not match its declared output: "
        f"{_describe(errors)}{more}. The call ran: read side_effect before retrying",
        code="output_mismatch",
        details={"errors": errors},
    )
    return replace(state, result=replace(result, outcome=Outcome.FAILED, error=error))


def _describe(errors: dict[str, Any]) -> str:
    return ", ".join(
        f"{field}: "
        + ("; ".join(str(p) for p in problems) if isinstance(problems, list) else str(problems))
        for field, problems in sorted(errors.items(), key=lambda item: str(item[0]))
    )
