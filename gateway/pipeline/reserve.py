"""Stage 5 — idempotency & reservation: the execution record is durable before any effect.

A call that already has an execution (same idempotency key, or same run_id + call_id)
resolves to it: the committed result is replayed, a different payload is rejected, and
one still in flight is a conflict.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import replace

from gateway import jsontext
from gateway.adapters.registry import SPECS
from gateway.errors import Conflict, IdempotencyMismatch, PolicyDenied
from gateway.events.model import Event, make_event
from gateway.instance import INSTANCE_ID
from gateway.pipeline.records import Flow
from gateway.pipeline.services import Services
from gateway.store.records import ExecutionRecord, IdempotencyClaim
from gateway.store.store import ApprovalUnavailable, Existing
from gateway.types import SideEffect, Status


def build_record(
    flow: Flow,
    status: Status,
    scope: str | None = None,
    *,
    risk: str | None = None,
    outcome: str | None = None,
    result_json: str | None = None,
    fencing_json: str | None = None,
    owner: str | None = None,
    payload_sha256: str | None = None,
) -> ExecutionRecord:
    """The execution row for ``flow`` as it stands now (``scope``: its idempotency scope,
    when already computed; the other keywords are columns not known from the flow)."""
    req = flow.request
    now = int(time.time() * 1000)
    return ExecutionRecord(
        id=flow.execution_id,
        principal=req.principal,
        agent_id=req.agent_id,
        run_id=req.run_id,
        turn_id=req.turn_id,
        call_id=req.call_id,
        payload_sha256=payload_sha256 or req.payload_sha256,
        workspace_id=req.workspace_id,
        tool_name=flow.tool.name if flow.tool else req.tool_name,
        tool_version=str(flow.tool.version) if flow.tool else None,
        risk=risk,
        status=status,
        outcome=outcome,
        arguments_sha256=flow.arguments_sha256,
        idempotency_scope=scope if scope is not None else idempotency_scope(flow),
        approval_id=flow.awaiting.id if flow.awaiting else None,
        cancellation_token=req.cancellation_token,
        request_json=jsontext.compact(req.to_json()),
        result_json=result_json,
        fencing_json=fencing_json,
        owner=owner,
        created_ms=flow.received_ms,
        updated_ms=now,
    )


def idempotency_scope(flow: Flow) -> str | None:
    """sha256 of principal + workspace + tool + key: the key's namespace (docs/api.md#idempotency,
    'Scope')."""
    req = flow.request
    if not req.idempotency_key or flow.tool is None or flow.tool.idempotency == "none":
        return None
    raw = "\x1f".join((req.principal, req.workspace_id, flow.tool.name, req.idempotency_key))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


async def run(services: Services, flow: Flow) -> Flow:
    assert flow.tool is not None
    if flow.record is not None:
        return await _resume(services, flow)
    scope = idempotency_scope(flow)
    claim = None
    if scope is not None:
        claim = IdempotencyClaim(
            scope=scope,
            arguments_sha256=flow.arguments_sha256 or "",
            tool_version=str(flow.tool.version),
            expires_ms=int((time.time() + services.settings.idempotency_ttl) * 1000),
        )
    if _needs_no_reservation(flow, claim):
        return flow.but(ephemeral=True)
    status = Status.RUNNING
    if flow.awaiting:
        status = Status.AWAITING_APPROVAL
    elif flow.respond_async:
        status = Status.QUEUED
    tool = flow.tool
    owner = INSTANCE_ID if status is Status.RUNNING else None

    req = flow.request
    call = (req.principal, req.run_id, req.call_id, req.payload_sha256)
    built: list[ExecutionRecord] = []

    def record_now() -> ExecutionRecord:  # a replay never needs it: built on demand, once
        if not built:
            built.append(
                build_record(
                    flow, status, scope, risk=tool.risk.value, owner=owner, payload_sha256=call[3]
                )
            )
        return built[0]

    spend = flow.approval.id if flow.approval else None
    outcome = await services.store.reserve(
        record_now,
        flow.events,
        claim,
        consume_approval=spend,
        on_existing=_replay_note(flow),
        call=call,
    )
    if isinstance(outcome, Existing):
        return await _existing(services, flow, outcome)
    if isinstance(outcome, ApprovalUnavailable):
        raise PolicyDenied(
            "approval_token refused: its approval was already used (a token is good for one call)",
            code="approval_token_used",
        )
    record = record_now()
    flow = flow.but(record=record, events=())
    if flow.awaiting is not None:
        return await _checkpoint(services, flow)
    if status is Status.QUEUED:
        services.wake_workers()
        return flow.but(existing=record)
    return flow


def _needs_no_reservation(flow: Flow, claim: IdempotencyClaim | None) -> bool:
    """A read (no side effect) that nobody waits on, replays or approves needs no durable
    reservation: the execution is written once, with its result (saves two transactions).
    """
    assert flow.tool is not None
    spec = SPECS.get(flow.tool.adapter)
    return (
        flow.tool.side_effect in (SideEffect.NONE, SideEffect.READ)
        and not (spec is not None and spec.durable_reads)
        and claim is None
        and flow.awaiting is None
        and flow.approval is None
        and not flow.respond_async
    )


async def _resume(services: Services, flow: Flow) -> Flow:
    """A parked or queued execution goes on: approved ones spend their approval; both are
    marked running, durably, by this process."""
    if flow.approval is None:  # dequeued: the worker's claim already marked it running
        if flow.awaiting is not None:  # policy now wants a person: park it, do not run it
            return await _checkpoint(services, flow)
        await services.store.append(flow.execution_id, flow.events)
        return flow.drained()
    if not await services.store.resume(
        flow.execution_id, flow.approval.id, flow.events, INSTANCE_ID
    ):
        raise PolicyDenied(
            "the approval was already used by another call", code="approval_token_used"
        )
    return flow.drained()


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


async def _existing(services: Services, flow: Flow, found: Existing) -> Flow:
    first = found.record
    if found.by == "call_id":
        return flow.but(existing=same_call(found), events=())
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
        return flow.but(existing=first, events=())  # _replay_note logged the replay
    raise AssertionError(f"unknown kind of existing execution: {found.by}")


def _replay_note(flow: Flow) -> Callable[[Existing], list[Event]]:
    """The note a replay leaves on the first execution's log (who asked, and when), written
    in the reservation's transaction; nothing for a key in flight or a different payload,
    which are refused."""

    def note(found: Existing) -> list[Event]:
        first = found.record
        if found.by != "idempotency_key" or not found.same_payload or not first.terminal:
            return []
        data = {"replay": True, "call_id": flow.request.call_id}
        return [make_event(first.id, 0, "tool.requested", data)]  # the store numbers it

    return note


async def _checkpoint(services: Services, flow: Flow) -> Flow:
    assert flow.awaiting is not None
    approval = flow.awaiting
    flow = flow.emit(
        "approval.requested",
        approval_id=approval.id,
        reasons=list(approval.reasons),
        expires_at_ms=approval.expires_ms,
    ).emit("state.checkpointed", status=Status.AWAITING_APPROVAL.value)
    await services.store.checkpoint_for_approval(approval, flow.events)
    record = flow.record
    assert record is not None
    parked = replace(record, approval_id=approval.id, status=Status.AWAITING_APPROVAL)
    return flow.but(existing=parked, events=())
