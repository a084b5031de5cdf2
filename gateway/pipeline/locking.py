"""Stage 6 — resource locks: declared keys, sorted, shared/exclusive, leased, fenced.

Locks live in the store (not in memory) so they hold across processes and replicas.
After the locks are held, the state guards are checked again (compare-and-swap). A cancel
ends the wait at once: nothing was attempted, and the call ends ``cancelled``.
"""

from __future__ import annotations

import time

import anyio

from gateway.adapters.base import SideEffectReport
from gateway.declarations.templates import TemplateError
from gateway.errors import ExecutionError, ValidationError
from gateway.pipeline.context import deadline_of, template_context
from gateway.pipeline.records import Flow, ToolResult
from gateway.pipeline.services import Services
from gateway.pipeline.validate import check_state_guards
from gateway.store.records import LockBusy, LockRequest
from gateway.types import Outcome


def lock_requests(flow: Flow) -> list[LockRequest]:
    """The interpolated lock keys of the call; one mode per key (exclusive wins)."""
    assert flow.tool is not None
    context = template_context(flow)
    modes: dict[str, LockRequest] = {}
    for decl in flow.tool.locks:
        try:
            keys = decl.key.render_all(context)
        except TemplateError as exc:
            raise ValidationError(f"lock key {decl.key.source!r}: {exc}", code="lock_key") from exc
        for key in keys:
            if key not in modes or decl.mode.value == "exclusive":
                modes[key] = LockRequest(key, decl.mode)
    return sorted(modes.values(), key=lambda r: r.key)


async def run(services: Services, flow: Flow) -> Flow:
    requests = lock_requests(flow)
    if not requests:
        await check_state_guards(services, flow)
        return flow
    if flow.record is None:  # an ephemeral call has no execution anyone could cancel
        got = await _wait_for_locks(services, flow, requests, anyio.Event())
    else:
        cancelled = services.cancellations.register(flow.execution_id)
        try:
            got = await _wait_for_locks(services, flow, requests, cancelled)
        finally:
            services.cancellations.unregister(flow.execution_id)
    if got is None:
        return _cancelled_while_waiting(flow)
    flow = flow.but_emit({"fencing": got}, "lock.acquired", tokens=dict(got))
    await check_state_guards(services, flow)
    return flow


async def _wait_for_locks(
    services: Services, flow: Flow, requests: list[LockRequest], cancelled: anyio.Event
) -> dict[str, int] | None:
    """The fencing tokens once every lock is held; None when the call was cancelled while
    it waited: by this process's signal (at once), or, from another process, as the store
    reports with each busy answer."""
    deadline = deadline_of(services, flow)
    delay = 0.005
    beat = time.monotonic()
    while True:
        got = await services.store.try_acquire(
            flow.execution_id, flow.request.call_id, requests, services.settings.lock_lease
        )
        if not isinstance(got, LockBusy):
            return got
        if got.waiter_cancelled or cancelled.is_set():
            return None
        if time.time() + delay >= deadline:
            raise ExecutionError(
                f"lock {got.key!r} is held by call {got.holder_call_id!r} "
                f"(execution {got.holder}); retry later",
                code="lock_timeout",
                retryable=True,
                details={"holder_call_id": got.holder_call_id},
            )
        with anyio.move_on_after(delay):
            await cancelled.wait()
        if cancelled.is_set():
            return None
        delay = min(delay * 2, 0.1)
        if flow.record is not None and time.monotonic() - beat >= services.settings.lock_lease / 3:
            beat = time.monotonic()
            await services.store.heartbeat(flow.execution_id)  # alive, only waiting


def _cancelled_while_waiting(flow: Flow) -> Flow:
    """The call was cancelled before it held its locks: nothing was attempted."""
    assert flow.tool is not None
    result = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(flow.tool.version),
        outcome=Outcome.CANCELLED,
        error=ExecutionError("cancelled while it waited for a lock", code="cancelled"),
        side_effect=SideEffectReport(False, False, "nothing was attempted"),
    )
    return flow.but(result=result)
