"""Stage 5 — idempotency & reservation: the execution record is durable before any effect.

A call that already has an execution (same idempotency key, or same run_id + call_id)
resolves to it: the committed result is replayed, a different payload is rejected, and
one still in flight is a conflict.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway.adapters.registry import SPECS
from gateway.errors import Conflict, IdempotencyMismatch, PolicyDenied
from gateway.events.model import Event, make_event
from gateway.instance import INSTANCE_ID
from gateway.pipeline.existing import same_call
from gateway.pipeline.records import Authorized, Ended, Reserved, Trail
from gateway.pipeline.rows import build_record, idempotency_scope
from gateway.pipeline.services import Services
from gateway.store.records import ApprovalRecord, ExecutionRecord, IdempotencyClaim
from gateway.store.store import ApprovalUnavailable, Existing
from gateway.types import SideEffect, Status

log = logging.getLogger("toolgate.approvals")


async def run(services: Services, state: Authorized) -> Reserved | Ended:
    call = state.call
    ticket, tool = call.ticket, call.tool
    if ticket.stored is not None:
        return await _resume(services, state, ticket.stored)
    req = ticket.request
    scope = idempotency_scope(req, tool)
    claim = None
    if scope is not None:
        claim = IdempotencyClaim(
            scope=scope,
            arguments_sha256=call.arguments_sha256,
            tool_version=str(tool.version),
            expires_ms=int((time.time() + services.settings.idempotency_ttl) * 1000),
        )
    if _needs_no_reservation(state, claim):
        return Reserved(call, None, state.trail)
    status = Status.RUNNING
    if state.awaiting:
        status = Status.AWAITING_APPROVAL
    elif ticket.respond_async:
        status = Status.QUEUED
    owner = INSTANCE_ID if status is Status.RUNNING else None

    identity = (req.principal, req.run_id, req.call_id, req.payload_sha256)
    built: list[ExecutionRecord] = []

    def record_now() -> ExecutionRecord:  # a replay never needs it: built on demand, once
        if not built:
            built.append(
                build_record(
                    ticket,
                    tool,
                    call.arguments_sha256,
                    status,
                    scope,
                    approval_id=state.awaiting.id if state.awaiting else None,
                    risk=tool.risk.value,
                    owner=owner,
                    payload_sha256=identity[3],
                )
            )
        return built[0]

    spend = state.approval.id if state.approval else None
    trail = state.trail
    if state.awaiting is not None:  # parked in the reservation itself, with its approval
        trail = _parked(trail, state.awaiting)
    outcome = await services.store.reserve(
        record_now,
        trail.events,
        claim,
        consume_approval=spend,
        on_existing=_replay_note(req.call_id),
        call=identity,
        approval=state.awaiting,
    )
    if isinstance(outcome, Existing):
        return _existing(outcome)
    if isinstance(outcome, ApprovalUnavailable):
        raise PolicyDenied(
            "approval_token refused: its approval was already used (a token is good for one call)",
            code="approval_token_used",
        )
    record = record_now()
    trail = trail.drained()
    if state.awaiting is not None:
        return Ended(record)
    if status is Status.QUEUED:
        services.wake_workers()
        return Ended(record)
    return Reserved(call, record, trail)


def _needs_no_reservation(state: Authorized, claim: IdempotencyClaim | None) -> bool:
    """A read (no side effect) that nobody waits on, replays or approves needs no durable
    reservation: the execution is written once, with its result (saves two transactions).
    """
    tool = state.call.tool
    spec = SPECS.get(tool.adapter)
    return (
        tool.side_effect in (SideEffect.NONE, SideEffect.READ)
        and not (spec is not None and spec.durable_reads)
        and claim is None
        and state.awaiting is None
        and state.approval is None
        and not state.call.ticket.respond_async
    )


async def _resume(
    services: Services, state: Authorized, record: ExecutionRecord
) -> Reserved | Ended:
    """A parked or queued execution goes on: approved ones spend their approval; both are
    marked running, durably, by this process."""
    execution_id, events = record.id, state.trail.events
    if state.call.ticket.approval is None or state.approval is None:
        # dequeued: the worker's claim marked it running (an approval_token it carries was
        # spent by its reservation: nothing to spend now)
        if state.awaiting is not None:  # policy now wants a person: park it, do not run it
            return await _checkpoint(services, record, state.awaiting, state.trail)
        await services.store.append(execution_id, events)
        return Reserved(state.call, record, state.trail.drained())
    if not await services.store.resume(execution_id, state.approval.id, events, INSTANCE_ID):
        # Another replica resumed it first (the one that took the decision, or recovery),
        # or it was cancelled while parked: that one settles it; this flow writes nothing.
        now = await services.store.get_execution(execution_id) or record
        log.info(
            "resuming %s on approval %s runs nothing: the approval is spent or the call no "
            "longer waits for it (now %s%s); whoever resumed or ended it settles it",
            execution_id,
            state.approval.id,
            now.status.value,
            f", owner {now.owner}" if now.owner else "",
        )
        return Ended(now)
    return Reserved(state.call, record, state.trail.drained())


def _existing(found: Existing) -> Ended:
    first = found.record
    if found.by == "call_id":
        return Ended(same_call(found))
    if found.by == "idempotency_key":
        if not found.same_payload:
            raise IdempotencyMismatch(
                "this idempotency key was used for different arguments or another version "
                f"(execution {first.id}); use a new key for a new call",
                details={"execution_id": first.id},
            )
        if not first.terminal:
            raise Conflict(
                f"a call with this idempotency key is still {first.status.value} "
                f"(execution {first.id}); retry later",
                code="idempotency_key_in_flight",
                details={"execution_id": first.id},
            )
        return Ended(first)  # _replay_note logged the replay
    raise AssertionError(f"unknown kind of existing execution: {found.by}")


def _replay_note(call_id: str) -> Callable[[Existing], list[Event]]:
    """The note a replay leaves on the first execution's log (who asked, and when), written
    in the reservation's transaction; nothing for a key in flight or a different payload,
    which are refused."""

    def note(found: Existing) -> list[Event]:
        first = found.record
        if found.by != "idempotency_key" or not found.same_payload or not first.terminal:
            return []
        data = {"replay": True, "call_id": call_id}
        return [make_event(first.id, 0, "tool.requested", data)]  # the store numbers it

    return note


def _parked(trail: Trail, approval: ApprovalRecord) -> Trail:
    """The events of a call parked for ``approval``."""
    return trail.emit(
        "approval.requested",
        approval_id=approval.id,
        reasons=list(approval.reasons),
        expires_at_ms=approval.expires_ms,
    ).emit("state.checkpointed", status=Status.AWAITING_APPROVAL.value)


async def _checkpoint(
    services: Services, record: ExecutionRecord, approval: ApprovalRecord, trail: Trail
) -> Ended:
    """Park an execution that exists already (dequeued, and policy now wants a person)."""
    trail = _parked(trail, approval)
    await services.store.checkpoint_for_approval(approval, trail.events)
    return Ended(record._replace(approval_id=approval.id, status=Status.AWAITING_APPROVAL))
