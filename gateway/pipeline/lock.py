"""Stage 6 — resource locks: declared keys, sorted, shared/exclusive, leased, fenced.

Locks live in the store (not in memory) so they hold across processes and replicas.
After the locks are held, the state guards are checked again (compare-and-swap). A cancel
ends the wait at once: nothing was attempted, and the call ends ``cancelled``.
"""

from __future__ import annotations

import time

import anyio

from gateway.declarations.templates import TemplateError
from gateway.errors import ExecutionError, ValidationError
from gateway.pipeline.context import deadline_of, template_context
from gateway.pipeline.guards import check_state_guards
from gateway.pipeline.outcomes import ended_before_start
from gateway.pipeline.records import NO_LOCKS, Call, Locked, Reserved, Settled
from gateway.pipeline.services import Services
from gateway.store.records import ExecutionRecord, LockBusy, LockRequest
from gateway.types import Outcome


def lock_requests(call: Call) -> list[LockRequest]:
    """The interpolated lock keys of the call; one mode per key (exclusive wins)."""
    context = template_context(call)
    modes: dict[str, LockRequest] = {}
    for decl in call.tool.locks:
        try:
            keys = decl.key.render_all(context)
        except TemplateError as exc:
            raise ValidationError(f"lock key {decl.key.source!r}: {exc}", code="lock_key") from exc
        for key in keys:
            if key not in modes or decl.mode.value == "exclusive":
                modes[key] = LockRequest(key, decl.mode)
    return sorted(modes.values(), key=lambda r: r.key)


async def run(services: Services, state: Reserved) -> Locked | Settled:
    call, record = state.call, state.record
    requests = lock_requests(call)
    if not requests:
        await check_state_guards(services, call)
        return Locked(call, record, NO_LOCKS, state.trail)
    execution_id = call.ticket.execution_id
    if record is None:  # an ephemeral call has no execution anyone could cancel
        got = await _wait_for_locks(services, call, record, requests, None)
    else:
        cancelled = services.cancellations.register(execution_id)
        try:
            got = await _wait_for_locks(services, call, record, requests, cancelled)
        finally:
            services.cancellations.unregister(execution_id)
    if got is None:  # cancelled before it held its locks: nothing was attempted
        error = ExecutionError("cancelled while it waited for a lock", code="cancelled")
        return ended_before_start(state, Outcome.CANCELLED, error)
    locked = Locked(call, record, got, state.trail.emit("lock.acquired", tokens=dict(got)))
    await check_state_guards(services, call, got)
    return locked


async def _wait_for_locks(
    services: Services,
    call: Call,
    record: ExecutionRecord | None,
    requests: list[LockRequest],
    cancelled: anyio.Event | None,
) -> dict[str, int] | None:
    """The fencing tokens once every lock is held; None when the call was cancelled while
    it waited: by this process's signal (at once), or, from another process, as the store
    reports with each busy answer. ``cancelled`` is None for a call nothing can cancel (an
    ephemeral read: no signal made for every read only to be left unset)."""
    busy_since: float | None = None
    timed_out = False
    try:
        deadline = deadline_of(services, call)
        execution_id = call.ticket.execution_id
        delay = 0.005
        beat = time.monotonic()
        while True:
            got = await services.store.try_acquire(
                execution_id, call.ticket.request.call_id, requests, services.settings.lock_lease
            )
            if not isinstance(got, LockBusy):
                return got
            busy_since = busy_since or time.monotonic()
            if got.waiter_cancelled or (cancelled is not None and cancelled.is_set()):
                return None
            if time.time() + delay >= deadline:
                timed_out = True
                raise ExecutionError(
                    f"lock {got.key!r} is held by call {got.holder_call_id!r} "
                    f"(execution {got.holder}); retry later",
                    code="lock_timeout",
                    retryable=True,
                    details={"holder_call_id": got.holder_call_id},
                )
            if cancelled is None:
                await anyio.sleep(delay)
            else:
                with anyio.move_on_after(delay):
                    await cancelled.wait()
                if cancelled.is_set():
                    return None
            delay = min(delay * 2, 0.1)
            if record is not None and time.monotonic() - beat >= services.settings.lock_lease / 3:
                beat = time.monotonic()
                await services.store.heartbeat(execution_id)  # alive, only waiting
    finally:
        metrics = services.telemetry.metrics
        if metrics is not None and busy_since is not None:
            metrics.lock_waited(time.monotonic() - busy_since, timed_out)
