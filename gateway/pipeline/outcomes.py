"""A call on its way becomes ``Settled``: with a result it ended on early (a refusal, a
cancel before the adapter ran), or the one the adapter's outcome became."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gateway.adapters.base import NOTHING_ATTEMPTED
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ToolgateError
from gateway.pipeline.records import (
    NO_LOCKS,
    Authorized,
    Call,
    Executed,
    Prepared,
    Requested,
    Reserved,
    Resolved,
    Settled,
    Started,
    Ticket,
    ToolResult,
    Trail,
    Working,
)
from gateway.store.records import ExecutionRecord
from gateway.types import Outcome, Phase

Before = Working | Started
"""Every record a result can be settled from."""

# isinstance against tuples built once: ``A | B`` in a call builds a union object each time,
# and these run several times per stage of every call.
_WITH_TICKET = (Requested, Resolved, Settled)
_WITH_TOOL = (Resolved, Settled)
_UNRESOLVED = (Requested, Resolved)
_UNRESERVED = (Prepared, Authorized)
_STARTED = (Started, Executed, Settled)


def ticket_of(state: Before) -> Ticket:
    if isinstance(state, _WITH_TICKET):
        return state.ticket
    return state.call.ticket


def tool_of(state: Before) -> ToolDeclaration | None:
    if isinstance(state, Requested):
        return None
    if isinstance(state, _WITH_TOOL):
        return state.tool
    return state.call.tool


def record_of(state: Before) -> ExecutionRecord | None:
    """The execution as this call knows it to be stored (``None``: not durable yet)."""
    if isinstance(state, _UNRESOLVED):
        return state.ticket.stored
    if isinstance(state, _UNRESERVED):
        return state.call.ticket.stored
    return state.record


def started_ms_of(state: Before) -> int | None:
    """When ``tool.started`` was emitted; ``None`` before (the side effect cannot have begun)."""
    if isinstance(state, _STARTED):
        return state.started_ms
    return None


def settled(state: Before, result: ToolResult, trail: Trail | None = None) -> Settled:
    """``state`` ended with ``result`` (``trail``: its trail, if it moved on since)."""
    trail = trail or state.trail
    if isinstance(state, Settled):
        return replace(state, result=result, trail=trail)
    if isinstance(state, _UNRESOLVED):
        ticket = state.ticket
        tool = state.tool if isinstance(state, Resolved) else None
        return Settled(
            ticket, tool, None, ticket.stored, False, NO_LOCKS, None, None, result, trail
        )
    call = state.call
    if isinstance(state, Reserved):
        return _of(call, state.record, state.record is None, NO_LOCKS, None, None, result, trail)
    if isinstance(state, _UNRESERVED):  # not reserved yet
        return _of(call, call.ticket.stored, False, NO_LOCKS, None, None, result, trail)
    record, fencing = state.record, state.fencing
    adapter_returned = isinstance(state, Executed) and not isinstance(state.returned, ToolgateError)
    ran = call if adapter_returned else None
    started = started_ms_of(state)
    return _of(call, record, record is None, fencing, started, ran, result, trail)


def _of(
    call: Call,
    record: ExecutionRecord | None,
    ephemeral: bool,
    fencing: Mapping[str, int],
    started_ms: int | None,
    ran: Call | None,
    result: ToolResult,
    trail: Trail,
) -> Settled:
    return Settled(
        call.ticket,
        call.tool,
        call.arguments_sha256,
        record,
        ephemeral,
        fencing,
        started_ms,
        ran,
        result,
        trail,
    )


def ended_before_start(
    state: Before, outcome: Outcome, error: ToolgateError, trail: Trail | None = None
) -> Settled:
    """``state`` ended with ``outcome`` before its adapter was called: nothing attempted."""
    tool = tool_of(state)
    result = ToolResult(
        call_id=ticket_of(state).request.call_id,
        tool_version=str(tool.version) if tool else None,
        outcome=outcome,
        error=error,
        side_effect=NOTHING_ATTEMPTED,
    )
    return settled(state, result, trail)


def failed(state: Before, error: ToolgateError) -> Settled:
    """``state`` ended ``failed`` with ``error``, nothing attempted: what a ``CallError``
    raised by a stage becomes."""
    trail = state.trail
    if error.phase in (Phase.RESOLVE, Phase.VALIDATE):
        trail = trail.emit("tool.validation_failed", **error.to_json())
    return ended_before_start(state, Outcome.FAILED, error, trail)
