"""Stage 7 — adapter execution under the deadline, cancellable, with leases kept alive.

``tool.started`` is durable before the adapter is called: after a crash, recovery knows
the side effect may have begun. While the adapter runs, this stage renews lock leases and
the execution's heartbeat, streams output, and watches for a cancel (local signal, or the
store's status turned ``cancelling`` by another replica). A cancelled adapter gets
``cancel_grace`` seconds to stop by itself before it is cut off. Every exception is
captured as the flow's ``failure``; stage 8 turns it into an outcome.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import anyio

from gateway.adapters.base import Adapter, AdapterCall, AdapterOutcome, SideEffectReport
from gateway.errors import ExecutionError, ToolgateError
from gateway.pipeline.context import adapter_call, adapter_of
from gateway.pipeline.output import OutputSink
from gateway.pipeline.records import Flow, ToolResult
from gateway.pipeline.services import Services
from gateway.types import Outcome, Status

log = logging.getLogger("toolgate.execute")
WATCH_INTERVAL = 0.5


async def run(services: Services, flow: Flow) -> Flow:
    assert flow.tool is not None
    flow = flow.but(started_ms=int(time.time() * 1000)).emit(
        "tool.started", adapter=flow.tool.adapter, operation=flow.tool.operation
    )
    durable = not flow.ephemeral
    if durable:
        running = [Status.RUNNING]
        if not await services.store.set_status(
            flow.execution_id, running, Status.RUNNING, flow.events
        ):
            return _cancelled_before_start(flow)  # a cancel arrived while it waited for locks
        flow = flow.drained()
    await services.faults.hit("before_adapter")
    cancelled = services.cancellations.register(flow.execution_id)
    sink = OutputSink(services.store, flow.execution_id, flow.seq, durable=durable)
    call = replace(
        adapter_call(services, flow, cancelled),
        emit_output=sink.emit,
        checkpoint=sink.checkpoint,
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_keep_alive, services, flow, cancelled)
            tg.start_soon(sink.run)
            raw, failure = await _call_adapter(
                adapter_of(services, flow), call, services.settings.cancel_grace
            )
            tg.cancel_scope.cancel()
    finally:
        services.cancellations.unregister(flow.execution_id)
    await sink.flush()
    await services.faults.hit("after_side_effect")
    return flow.but(
        events=(*flow.events, *sink.kept),
        seq=sink.next_seq,
        raw=raw,
        failure=failure,
        finished_ms=int(time.time() * 1000),
    )


def _cancelled_before_start(flow: Flow) -> Flow:
    assert flow.tool is not None
    result = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(flow.tool.version),
        outcome=Outcome.CANCELLED,
        error=ExecutionError("cancelled before the adapter started", code="cancelled"),
        side_effect=SideEffectReport(False, False, "nothing was attempted"),
    )
    unstarted = tuple(e for e in flow.events if e.type != "tool.started")
    return flow.but(result=result, started_ms=None, events=unstarted)


async def _call_adapter(
    adapter: Adapter, call: AdapterCall, grace: float
) -> tuple[AdapterOutcome | None, ToolgateError | None]:
    """The adapter's outcome, or its failure translated into the error tree."""
    outcome: list[tuple[AdapterOutcome | None, ToolgateError | None]] = []

    async def cut_off_after_grace(scope: anyio.CancelScope) -> None:
        await call.cancelled.wait()
        await anyio.sleep(grace)
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(cut_off_after_grace, tg.cancel_scope)
        outcome.append(await _guarded(adapter, call))
        tg.cancel_scope.cancel()
    if outcome:
        return outcome[0]
    return None, ExecutionError(
        f"{call.tool.ref} was cancelled and did not stop within {grace:g} s; it was cut off",
        code="cancelled",
    )


async def _guarded(
    adapter: Adapter, call: AdapterCall
) -> tuple[AdapterOutcome | None, ToolgateError | None]:
    tool = call.tool
    try:
        with anyio.fail_after(max(call.seconds_left(), 0.0)):
            return await adapter.execute(call), None
    except TimeoutError:
        return None, ExecutionError(
            f"{tool.ref} did not finish before its deadline (timeout)",
            code="timeout",
            retryable=True,
        )
    except ToolgateError as exc:
        return None, exc
    except Exception as exc:
        log.exception("adapter %s failed in execution %s", tool.adapter, call.execution_id)
        return None, ExecutionError(
            f"the {tool.adapter} adapter failed unexpectedly ({type(exc).__name__}); "
            f"see the gateway log for execution {call.execution_id}",
            code="adapter_crashed",
        )


async def _keep_alive(services: Services, flow: Flow, cancelled: anyio.Event) -> None:
    """Renew leases and the heartbeat; turn a store-side ``cancelling`` into the signal."""
    lease = services.settings.lock_lease
    last_renew = time.monotonic()
    while True:
        await anyio.sleep(WATCH_INTERVAL)
        try:
            record = await services.store.get_execution(flow.execution_id)
            if record is not None and record.status is Status.CANCELLING:
                cancelled.set()
            if time.monotonic() - last_renew >= lease / 3:
                last_renew = time.monotonic()
                await services.store.heartbeat(flow.execution_id)
                if flow.fencing:
                    await services.store.renew_locks(flow.execution_id, lease)
        except ToolgateError:
            log.warning("could not renew the leases of %s", flow.execution_id)
