"""Stage 10 — commit: result, evidence, idempotency state, lock release and the final
event in one transaction; only then is the result returned."""

from __future__ import annotations

import json
from dataclasses import replace

from gateway import jsontext
from gateway.events.model import make_event
from gateway.pipeline.records import Flow
from gateway.pipeline.reserve import build_record, same_call
from gateway.pipeline.services import Services
from gateway.store.store import Existing
from gateway.types import Status


async def run(services: Services, flow: Flow) -> Flow:
    result = flow.result
    assert result is not None
    body = result.to_json()
    completed = make_event(
        flow.execution_id,
        flow.seq,
        "tool.completed",
        {"outcome": body["outcome"], "error": body["error"], "side_effect": body["side_effect"]},
    )
    events = (*flow.events, completed)
    done = {"events": (), "seq": flow.seq + 1}
    result_json = jsontext.stored(body)
    fencing_json = json.dumps(dict(flow.fencing)) if flow.fencing else None
    if flow.record is None:
        record = build_record(
            flow,
            Status.COMPLETED,
            outcome=result.outcome.value,
            result_json=result_json,
            fencing_json=fencing_json,
            # an ephemeral read passed validation: it counts against quotas
            risk=flow.tool.risk.value if flow.ephemeral and flow.tool else None,
        )
        found = await services.store.insert_completed(record, events)
        if isinstance(found, Existing):  # the call_id was used before: the first call answers
            return flow.but(existing=same_call(found), **done)
        return flow.but(record=record, **done)
    committed = await services.store.commit(
        flow.execution_id,
        outcome=result.outcome.value,
        result_json=result_json,
        events=events,
        fencing_json=fencing_json,
    )
    if not committed:  # someone else (a cancel, recovery) settled it first: theirs stands
        current = await services.store.get_execution(flow.execution_id)
        return flow.but(existing=current or flow.record, **done)
    record = replace(
        flow.record,
        status=Status.COMPLETED,
        outcome=result.outcome.value,
        result_json=result_json,
        fencing_json=fencing_json,
    )
    return flow.but(record=record, **done)
