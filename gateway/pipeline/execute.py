"""Stage 7 — adapter execution under the deadline, with the lock lease kept alive.

``tool.started`` is durable before the adapter is called: after a crash, recovery knows
the side effect may have begun. Every exception is captured here as the flow's
``failure`` (translated if foreign); stage 8 turns it into an outcome.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import anyio

from gateway.adapters.base import Adapter, AdapterCall, AdapterOutcome
from gateway.errors import ExecutionError, ToolgateError
from gateway.pipeline.context import adapter_call, adapter_of
from gateway.pipeline.output import OutputSink
from gateway.pipeline.records import Flow
from gateway.pipeline.services import Services
from gateway.types import Status

log = logging.getLogger("toolgate.execute")


async def run(services: Services, flow: Flow) -> Flow:
    assert flow.tool is not None
    started = int(time.time() * 1000)
    flow = flow.but(started_ms=started).emit(
        "tool.started", adapter=flow.tool.adapter, operation=flow.tool.operation
    )
    await services.store.append(flow.execution_id, flow.events, Status.RUNNING)
    flow = flow.drained()
    sink = OutputSink(services.store, flow.execution_id, flow.seq)
    call = replace(adapter_call(services, flow), emit_output=sink.emit, checkpoint=sink.checkpoint)
    async with anyio.create_task_group() as tg:
        if flow.fencing:
            tg.start_soon(_renew_leases, services, flow.execution_id)
        tg.start_soon(sink.run)
        raw, failure = await _call_adapter(adapter_of(services, flow), call)
        tg.cancel_scope.cancel()
    await sink.flush()
    flow = flow.but(seq=sink.next_seq)
    return flow.but(raw=raw, failure=failure, finished_ms=int(time.time() * 1000))


async def _call_adapter(
    adapter: Adapter, call: AdapterCall
) -> tuple[AdapterOutcome | None, ToolgateError | None]:
    """The adapter's outcome, or its failure translated into the error tree."""
    tool = call.tool
    try:
        with anyio.fail_after(max(call.seconds_left(), 0.0)):
            return await adapter.execute(call), None
    except TimeoutError:
        return None, ExecutionError(
            f"{tool.ref} did not finish before its deadline", code="timeout", retryable=True
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


async def _renew_leases(services: Services, holder: str) -> None:
    lease = services.settings.lock_lease
    while True:
        await anyio.sleep(lease / 3)
        try:
            await services.store.renew_locks(holder, lease)
        except ToolgateError:
            log.warning("could not renew the lock lease of %s", holder)
