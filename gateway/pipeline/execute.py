"""Stage 7 — adapter execution under the deadline, cancellable, with leases kept alive.

``tool.started`` is durable before the adapter is called: after a crash, recovery knows
the side effect may have begun. While the adapter runs, this stage renews lock leases and
the execution's heartbeat, streams output, and watches for a cancel (local signal, or the
store's status turned ``cancelling`` by another replica). A cancelled adapter gets
``cancel_grace`` seconds to stop by itself before it is cut off. Every exception is
captured as the flow's ``failure``; stage 8 turns it into an outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time

import anyio

from gateway.adapters.base import Adapter, AdapterCall, AdapterOutcome, SideEffectReport
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ExecutionError, StoreError, ToolgateError
from gateway.pipeline.context import adapter_call, adapter_of, deadline_of
from gateway.pipeline.output import OutputSink
from gateway.pipeline.records import Flow, ToolResult
from gateway.pipeline.services import Services
from gateway.types import Outcome, Status

log = logging.getLogger("toolgate.execute")
WATCH_INTERVAL = 0.5
"""Seconds between looks at the store (a cancel from another replica, lease renewal)."""
FIRST_TICK = 0.25
"""Seconds into the call when the watchers start (the first output flush is due)."""


class Escaped(Exception):
    """Something escaped this stage (a gateway bug, an injected fault): raised from the
    original exception, with the flow as far as it got and whether the adapter was called,
    so that the runner's catch-all can settle the call truthfully."""

    def __init__(self, flow: Flow, adapter_called: bool) -> None:
        super().__init__(f"escaped the execute stage (adapter called: {adapter_called})")
        self.flow, self.adapter_called = flow, adapter_called


async def run(services: Services, flow: Flow) -> Flow:
    assert flow.tool is not None
    flow = flow.but_emit(
        {"started_ms": int(time.time() * 1000)},
        "tool.started",
        adapter=flow.tool.adapter,
        operation=flow.tool.operation,
    )
    try:
        durable = not flow.ephemeral
        if durable:
            running = [Status.RUNNING]
            if not await services.store.set_status(
                flow.execution_id, running, Status.RUNNING, flow.events
            ):
                return _cancelled_before_start(flow)  # a cancel arrived while it waited for locks
            flow = flow.drained()
        await services.faults.hit("before_adapter")
    except StoreError:
        raise  # the store is down: nothing can be recorded now; recovery settles it later
    except Exception as exc:
        raise Escaped(flow, adapter_called=False) from exc
    return await _run_adapter(services, flow, durable)


def _now() -> float:
    """Epoch seconds (a seam for tests: the last deadline check reads the clock here)."""
    return time.time()


START_FLOOR = 0.01
"""Seconds an adapter call must have left to be started at all: with less, a side effect
could begin and not finish (the call would end ``timeout`` with something attempted)."""


async def _run_adapter(services: Services, flow: Flow, durable: bool) -> Flow:
    if deadline_of(services, flow) - _now() < START_FLOOR:
        return _no_time_left(flow)  # the last look before the side effect: after the locks
    sink = OutputSink(services.store, flow.execution_id, flow.seq, durable=durable)
    watch = _Watch(services, flow, sink)
    try:
        try:
            call = adapter_call(
                services,
                flow,
                watch.cancelled,
                emit_output=sink.emit,
                checkpoint=sink.checkpoint,
            )
            raw, failure = await _call_adapter(adapter_of(services, flow), call, watch)
        finally:
            await watch.stop()
    except StoreError:
        raise
    except Exception as exc:
        raise Escaped(flow, adapter_called=True) from exc
    try:
        await sink.flush()
        await services.faults.hit("after_side_effect")
    except StoreError:
        raise
    except Exception as exc:
        raise Escaped(flow.but(raw=raw, failure=failure), adapter_called=True) from exc
    return flow.but(
        events=(*flow.events, *sink.kept),
        seq=sink.next_seq,
        raw=raw,
        failure=failure,
        finished_ms=int(time.time() * 1000),
    )


class _Watch:
    """What runs beside the adapter: output flushes, lease and heartbeat renewal, a cancel
    seen in the store (another replica's API), and the cut-off of an adapter that does not
    stop within ``cancel_grace`` of a cancel.

    None of it is due before the first output flush (``FIRST_TICK``), and most calls are
    over by then. So the watchers start only at that tick (or at once on a cancel signal),
    in a task of their own that holds their task group: a call that ends sooner spawns no
    task, opens no task group and cancels nothing (each costs more than a short adapter).
    """

    def __init__(self, services: Services, flow: Flow, sink: OutputSink) -> None:
        self._services, self._flow, self._sink = services, flow, sink
        self.grace = services.settings.cancel_grace
        self._began = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._done: anyio.Event | None = None
        self._stopped = False
        self.scope: anyio.CancelScope | None = None
        """The adapter's scope, cancelled at the cut-off."""
        self.cut_off = False
        self.cancelled = services.cancellations.register(flow.execution_id, self.start)
        """The call's cancel signal; signalling it starts the watchers at once."""
        self._tick = asyncio.get_running_loop().call_later(FIRST_TICK, self.start)

    def start(self) -> None:
        """Start the watchers (idempotent): at the first tick, or when a cancel is signalled."""
        if self._task is not None or self._stopped:
            return
        self._tick.cancel()
        self._done = anyio.Event()
        self._task = asyncio.get_running_loop().create_task(
            self._run(time.monotonic() - self._began)
        )

    async def _run(self, since: float) -> None:
        assert self._done is not None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._sink.run, since)
                tg.start_soon(self._keep_alive, max(WATCH_INTERVAL - since, 0.0))
                tg.start_soon(self._cut_off_after_grace)
                await self._done.wait()
                tg.cancel_scope.cancel()
        except BaseException:
            if self.scope is not None:
                self.scope.cancel()  # a watcher failed: stop the adapter; stop() re-raises
            raise

    async def stop(self) -> None:
        """The adapter is done: stop the watchers, if any started, and wait for them (a
        store call of theirs in flight completes first)."""
        self._services.cancellations.unregister(self._flow.execution_id)
        self._stopped = True
        self._tick.cancel()
        if self._task is not None:
            assert self._done is not None
            self._done.set()
            with anyio.CancelScope(shield=True):
                await self._task

    async def _cut_off_after_grace(self) -> None:
        await self.cancelled.wait()
        await anyio.sleep(self.grace)
        self.cut_off = True
        if self.scope is not None:
            self.scope.cancel()

    async def _keep_alive(self, first_wait: float) -> None:
        """Renew leases and the heartbeat; turn a store-side ``cancelling`` into the signal."""
        services, flow = self._services, self._flow
        lease = services.settings.lock_lease
        last_renew = self._began
        wait = first_wait
        while True:
            await anyio.sleep(wait)
            wait = WATCH_INTERVAL
            try:
                record = await services.store.get_execution(flow.execution_id)
                if record is not None and record.status is Status.CANCELLING:
                    self.cancelled.set()
                if time.monotonic() - last_renew >= lease / 3:
                    last_renew = time.monotonic()
                    await services.store.heartbeat(flow.execution_id)
                    if flow.fencing:
                        await services.store.renew_locks(flow.execution_id, lease)
            except ToolgateError:
                log.warning("could not renew the leases of %s", flow.execution_id)


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


def _no_time_left(flow: Flow) -> Flow:
    assert flow.tool is not None
    result = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(flow.tool.version),
        outcome=Outcome.FAILED,
        error=ExecutionError(
            f"{flow.tool.ref} reached its adapter with no time left before its deadline "
            "(after validation and locks); nothing was started: send a later deadline",
            code="deadline_exceeded",
            retryable=True,
        ),
        side_effect=SideEffectReport(False, False, "nothing was attempted"),
    )
    return flow.but(result=result, finished_ms=int(_now() * 1000))


async def _call_adapter(
    adapter: Adapter, call: AdapterCall, watch: _Watch
) -> tuple[AdapterOutcome | None, ToolgateError | None]:
    """The adapter's outcome, or its failure translated into the error tree.

    The adapter runs in this task, in one cancel scope: its deadline, and the watch's
    cut-off after a cancel's grace period."""
    tool = call.tool
    scope = watch.scope = anyio.CancelScope(
        deadline=anyio.current_time() + max(call.seconds_left(), 0.0)
    )
    with scope:
        try:
            return await adapter.execute(call), None
        except TimeoutError:
            return None, _timeout(tool)
        except ToolgateError as exc:
            return None, exc
        except Exception as exc:
            log.exception("adapter %s failed in execution %s", tool.adapter, call.execution_id)
            return None, ExecutionError(
                f"the {tool.adapter} adapter failed unexpectedly ({type(exc).__name__}); "
                f"see the gateway log for execution {call.execution_id}",
                code="adapter_crashed",
            )
    if not watch.cut_off:
        return None, _timeout(tool)  # the deadline cancelled the scope
    return None, ExecutionError(
        f"{tool.ref} was cancelled and did not stop within {watch.grace:g} s; it was cut off",
        code="cancelled",
    )


def _timeout(tool: ToolDeclaration) -> ToolgateError:
    return ExecutionError(
        f"{tool.ref} did not finish before its deadline (timeout)",
        code="timeout",
        retryable=True,
    )
