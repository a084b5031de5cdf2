"""End an execution that is not running here (parked, queued, or left by a crash) with a
given result, in one commit, with the events that say why.

Takes the pipeline's view of the runtime (it needs only the store): recovery, which holds
that view, closes executions here too."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from gateway import jsontext
from gateway.adapters.base import Evidence, SideEffectReport
from gateway.errors import ToolgateError
from gateway.events.model import make_event
from gateway.pipeline.records import ToolResult
from gateway.pipeline.services import Services
from gateway.store.records import ExecutionRecord
from gateway.types import Outcome


async def close_execution(
    services: Services,
    record: ExecutionRecord,
    outcome: Outcome,
    error: ToolgateError | None,
    side_effect: SideEffectReport,
    *,
    evidence: Iterable[Evidence] = (),
    before: Iterable[tuple[str, dict[str, Any]]] = (),
    release_key: bool = False,
) -> ExecutionRecord:
    """Commit ``outcome`` for ``record`` (if it is not terminal yet); returns the new state.

    ``before`` are (type, data) events to append ahead of ``tool.completed``.
    """
    if record.terminal:
        return record
    events = await services.store.events(record.id)
    seq = events[-1].seq + 1 if events else 0
    closing = []
    for type_, data in (*before, ("tool.completed", {})):
        if type_ == "tool.completed":
            data = {
                "outcome": outcome.value,
                "error": error.to_json() if error else None,
                "side_effect": side_effect.to_json(),
            }
        closing.append(make_event(record.id, seq, type_, data))
        seq += 1
    result = ToolResult(
        call_id=record.call_id,
        tool_version=record.tool_version,
        outcome=outcome,
        error=error,
        side_effect=side_effect,
        evidence=tuple(evidence),
        queued_ms=max(int(time.time() * 1000) - record.created_ms, 0),
    )
    if release_key:
        await services.store.release_claim(record.id)
    await services.store.commit(
        record.id,
        outcome=outcome.value,
        result_json=jsontext.stored(result.to_json()),
        events=closing,
        fencing_json=record.fencing_json,
    )
    if (metrics := services.telemetry.metrics) is not None:  # ended outside the pipeline
        phase = error.phase.value if error is not None and error.phase else ""
        metrics.execution(record.tool_name, outcome.value, phase)
    return await services.store.get_execution(record.id) or record
