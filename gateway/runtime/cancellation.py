"""Cancelling executions, and a person resolving an ``unknown`` one.

A queued or parked call is closed as cancelled at once (nothing was attempted). A running
one is marked ``cancelling`` (durably: whichever replica runs it sees it) and signalled
here; its execute stage stops the adapter and the result stage reconciles what happened.
"""

from __future__ import annotations

import json
import time

from gateway import jsontext
from gateway.adapters.base import SideEffectReport
from gateway.errors import Conflict, ExecutionError, Forbidden, MalformedRequest
from gateway.events.model import make_event
from gateway.runtime.closing import close_execution
from gateway.runtime.container import Runtime
from gateway.store.records import ExecutionRecord
from gateway.types import Outcome, Status

RESOLVABLE = {"succeeded": Outcome.SUCCEEDED, "failed": Outcome.FAILED}


async def cancel(runtime: Runtime, record: ExecutionRecord, by: str) -> ExecutionRecord:
    """Ask ``record`` to stop; returns its state after the request."""
    if record.terminal:
        raise Conflict(
            f"execution {record.id} already completed ({record.outcome})",
            code="already_completed",
            retryable=False,
        )
    note = make_event(record.id, 0, "state.checkpointed", {"status": "cancelling", "by": by})
    unstarted = [Status.QUEUED, Status.AWAITING_APPROVAL]
    taken = await runtime.store.move_status(record.id, unstarted, Status.CANCELLING, [note])
    if taken is not None:
        if taken.approval_id is not None:
            await runtime.store.withdraw_approval(taken.approval_id)
        error = ExecutionError(f"cancelled by {by} before it started", code="cancelled")
        effect = SideEffectReport(False, False, "nothing was attempted")
        return await close_execution(runtime, taken, Outcome.CANCELLED, error, effect)
    # The answer is the call as marked (202 cancelling), read with the mark: its flow sees
    # the mark at its next look (a lock wait polls it) and may end the call before any read
    # of ours that came after.
    marked = await runtime.store.move_status(record.id, [Status.RUNNING], Status.CANCELLING, [note])
    if marked is not None:
        runtime.cancellations.signal(record.id)
        return marked
    return await runtime.store.get_execution(record.id) or record


async def resolve_unknown(
    runtime: Runtime, record: ExecutionRecord, by: str, outcome: str, note: str
) -> ExecutionRecord:
    """Record a person's verdict on an ``unknown`` execution, as an event."""
    if outcome not in RESOLVABLE:
        raise MalformedRequest("outcome must be succeeded or failed", code="invalid_outcome")
    if not note.strip():
        raise MalformedRequest("say how you know (note)", code="note_required")
    if by == record.principal and not runtime.policy_data.approvers.allow_self_approval:
        raise Forbidden("nobody resolves the outcome of their own call", code="self_approval")
    if record.outcome != Outcome.UNKNOWN.value or record.result_json is None:
        raise Conflict(
            f"only an unknown outcome can be resolved; {record.id} is {record.outcome}",
            code="not_unknown",
            retryable=False,
        )
    result = json.loads(record.result_json)
    resolution = {"by": by, "note": note, "at_ms": int(time.time() * 1000), "was": "unknown"}
    result["outcome"] = outcome
    result["resolution"] = resolution
    result["side_effect"]["committed"] = outcome == "succeeded"
    result["side_effect"]["summary"] = f"resolved by {by} as {outcome}: {note}"
    if outcome == "succeeded":
        result["error"] = None
    event = make_event(record.id, 0, "outcome.resolved", {"outcome": outcome, **resolution})
    changed = await runtime.store.resolve_outcome(
        record.id, Outcome.UNKNOWN.value, outcome, jsontext.compact(result), event
    )
    if not changed:
        raise Conflict(
            f"{record.id} was resolved by someone else", code="not_unknown", retryable=False
        )
    return await runtime.store.get_execution(record.id) or record
