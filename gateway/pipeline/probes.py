"""Run declared probes (verify, reconcile) and turn what they read into evidence."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from gateway.adapters.base import Evidence
from gateway.declarations.model import ProbeDecl
from gateway.declarations.templates import TemplateError, _text
from gateway.errors import ToolgateError
from gateway.pipeline.context import adapter_call, adapter_of
from gateway.pipeline.records import NO_LOCKS, Call
from gateway.pipeline.services import Services

log = logging.getLogger("toolgate.probes")


async def run_probes(
    services: Services,
    call: Call,
    probes: Sequence[ProbeDecl],
    purpose: str,
    fencing: Mapping[str, int] = NO_LOCKS,
) -> tuple[bool | None, tuple[Evidence, ...]]:
    """(all passed?, evidence). ``None`` when a probe could not read the state at all."""
    execution_id = call.ticket.execution_id
    call_input = adapter_call(services, call, fencing)
    adapter = adapter_of(services, call)
    evidence: list[Evidence] = []
    passed: bool | None = True
    for probe in probes:
        try:
            context = call_input.context
            params = {k: t.render(context) for k, t in probe.params.items()}
            expected = probe.equals.render(context) if probe.equals is not None else None
            observed = await adapter.probe(probe.probe, params, call_input)
        except Exception as exc:  # no exception leaves a probe: it could not read the state
            evidence.append(_unreadable(execution_id, probe, purpose, exc))
            passed = None
            continue
        ok = _text(observed) == expected if expected is not None else bool(observed)
        evidence.append(
            Evidence(
                "probe",
                probe.probe,
                observed if isinstance(observed, str) and len(observed) == 64 else None,
                {
                    "purpose": purpose,
                    "params": params,
                    "expected": expected,
                    "observed": observed,
                    "passed": ok,
                },
            )
        )
        if not ok and passed is not None:
            passed = False
    return passed, tuple(evidence)


def _unreadable(execution_id: str, probe: ProbeDecl, purpose: str, exc: Exception) -> Evidence:
    """The evidence of a probe that raised: its own words for an error it translated, only
    the exception's class for anything else (the traceback goes to the log)."""
    if isinstance(exc, ToolgateError | TemplateError | OSError):
        log.warning("%s probe %s failed for %s: %s", purpose, probe.probe, execution_id, exc)
        why = str(exc)
    else:
        log.exception("%s probe %s crashed for %s", purpose, probe.probe, execution_id)
        why = f"the probe failed unexpectedly ({type(exc).__name__}); see the gateway log"
    return Evidence("probe", probe.probe, None, {"purpose": purpose, "error": why})
