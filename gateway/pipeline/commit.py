"""Stage 10 — commit: result, evidence, idempotency state, lock release and the final
event in one transaction; only then is the result returned."""

from __future__ import annotations

from gateway import jsontext
from gateway.events.model import make_event
from gateway.pipeline.existing import same_call
from gateway.pipeline.records import Ended, Settled
from gateway.pipeline.rows import build_record
from gateway.pipeline.services import Services
from gateway.store.store import Existing
from gateway.types import Status


async def run(services: Services, state: Settled) -> Ended:
    result, trail = state.result, state.trail
    body = result.to_json()
    completed = make_event(
        trail.execution_id,
        trail.seq,
        "tool.completed",
        {"outcome": body["outcome"], "error": body["error"], "side_effect": body["side_effect"]},
    )
    events = (*trail.events, completed)
    result_json = jsontext.stored(body)
    fencing = state.fencing
    fencing_json = jsontext.spaced(dict(fencing)) if fencing else None
    if state.record is None:
        tool = state.tool
        record = build_record(
            state.ticket,
            tool,
            state.arguments_sha256,
            Status.COMPLETED,
            outcome=result.outcome.value,
            result_json=result_json,
            fencing_json=fencing_json,
            # an ephemeral read passed validation: it counts against quotas
            risk=tool.risk.value if state.ephemeral and tool else None,
        )
        found = await services.store.insert_completed(record, events)
        if isinstance(found, Existing):  # the call_id was used before: the first call answers
            return Ended(same_call(found), release_locks=bool(fencing))
        return Ended(record)
    committed = await services.store.commit(
        trail.execution_id,
        outcome=result.outcome.value,
        result_json=result_json,
        events=events,
        fencing_json=fencing_json,
    )
    if not committed:  # someone else (a cancel, recovery) settled it first: theirs stands
        current = await services.store.get_execution(trail.execution_id)
        return Ended(current or state.record, release_locks=bool(fencing))
    record = state.record._replace(
        status=Status.COMPLETED,
        outcome=result.outcome.value,
        result_json=result_json,
        fencing_json=fencing_json,
    )
    return Ended(record)
