"""The answer to a request whose ``(run_id, call_id)`` was already used (reserve, commit)."""

from __future__ import annotations

from gateway.errors import Conflict
from gateway.store.records import ExecutionRecord
from gateway.store.store import Existing


def same_call(found: Existing) -> ExecutionRecord:
    """The execution a request with an already used ``(run_id, call_id)`` resolves to: the
    first one, as it stands, when the payload is the same; a 409 ``call_id_reused`` when not
    (docs/api.md, "Which answer comes first")."""
    first = found.record
    if not found.same_payload:
        raise Conflict(
            f"call_id {first.call_id!r} of run {first.run_id!r} was already used for a "
            f"different request (execution {first.id}); send a new call_id for a new call",
            code="call_id_reused",
            retryable=False,
            details={"execution_id": first.id},
        )
    return first
