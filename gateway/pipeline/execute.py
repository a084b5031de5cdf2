"""Stage 7 — adapter execution under the deadline, cancellable, with leases kept alive.

``tool.started`` is durable before the adapter is called: after a crash, recovery knows
the side effect may have begun. While the adapter runs, this stage renews lock leases and
the execution's heartbeat, streams output, and watches for a cancel (local signal, or the
store's status turned ``cancelling`` by another replica). A cancelled adapter gets
``cancel_grace`` seconds to stop by itself before it is cut off. Every exception is
captured as the call's failure (``Executed.returned``); stage 8 turns it into an outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time

import anyio

from gateway.adapters.base import Adapter, AdapterCall, AdapterOutcome, Immediate
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ExecutionError, StoreError, ToolgateError
from gateway.instance import INSTANCE_ID
from gateway.pipeline.context import adapter_call, adapter_of, deadline_of
from gateway.pipeline.outcomes import ended_before_start
from gateway.pipeline.output import OutputSink
from gateway.pipeline.records import Ended, Executed, Locked, Settled, Started, Trail
from gateway.pipeline.services import Services
from gateway.store.records import ExecutionRecord
from gateway.types import Outcome, Status

log = logging.getLogger("toolgate.execute")
WATCH_INTERVAL = 0.5
"""Seconds between looks at the store (a cancel from another replica, lease renewal)."""
FIRST_TICK = 0.25
"""Seconds into the call when the watchers start (the first output flush is due)."""


class Escaped(Exception):
    """Something escaped this stage (a gateway bug, an injected fault): raised from the
    original exception, with the call as far as it got and whether the adapter was called,
    so that the runner's catch-all can settle the call truthfully."""

    def __init__(self, state: Started | Executed, adapter_called: bool) -> None:
        super().__init__(f"escaped the execute stage (adapter called: {adapter_called})")
        self.state, self.adapter_called = state, adapter_called


async def run(services: Services, state: Locked) -> Executed | Settled | Ended:
    call, record, fencing = state.call, state.record, state.fencing
    started_ms = int(time.time() * 1000)
    tool = call.tool
    trail = state.trail.emit("tool.started", adapter=tool.adapter, operation=tool.operation)
    try:
        durable = record is not None
        if durable:
            assert record is not None
            running = [Status.RUNNING]
            execution_id = call.ticket.execution_id
            if not await services.store.set_status(
                execution_id, running, Status.RUNNING, trail.events, owner=_owner(record)
            ):
                now = await services.store.get_execution(execution_id)
                if now is not None and (
                    now.owner != _owner(record) or now.status is not Status.CANCELLING
                ):
                    # taken over meanwhile (this replica was taken for gone): another runs
                    # it, or will (queued again, even claimed here again: that worker leaves
                    # it to this one's, and recovery here finds it left behind); this flow
                    # starts nothing and writes nothing
                    log.warning(
                        "%s was taken over before it started: not started here", execution_id
                    )
                    return Ended(now)
                # a cancel arrived while it waited for locks: tool.started is not kept
                return _cancelled_before_start(state, trail.seq)
            trail = trail.drained()
        if services.faults.plan:  # a fault plan is set (tests, chaos runs)
            await services.faults.hit("before_adapter")
    except StoreError:
        raise  # the store is down: nothing can be recorded now; recovery settles it later
    except Exception as exc:
        raise Escaped(Started(call, record, fencing, started_ms, trail), False) from exc
    return await _run_adapter(services, Started(call, record, fencing, started_ms, trail), durable)


def _owner(record: ExecutionRecord) -> str:
    """Who runs ``record`` now: the replica that claimed it from the queue (its record says),
    else this one (it reserved or resumed it). ``tool.started`` is written only while the
    execution is still this owner's: recovery may have taken it over meanwhile."""
    return record.owner if record.status is Status.RUNNING and record.owner else INSTANCE_ID


def _now() -> float:
    """Epoch seconds (a seam for tests: the last deadline check reads the clock here)."""
    return time.time()


START_FLOOR = 0.01
"""Seconds an adapter call must have left to be started at all: with less, a side effect
could begin and not finish (the call would end ``timeout`` with something attempted)."""


async def _run_adapter(services: Services, state: Started, durable: bool) -> Executed | Settled:
    call, trail = state.call, state.trail
    if deadline_of(services, call) - _now() < START_FLOOR:
        return _no_time_left(state)  # the last look before the side effect: after the locks
    sink = OutputSink(services.store, call.ticket.execution_id, trail.seq, durable=durable)
    adapter = adapter_of(services, call)
    try:
        returned = _now_or_never(services, state, adapter, sink)
        if returned is None:
            watch = _Watch(services, state, sink)
            try:
                call_input = adapter_call(
                    services,
                    call,
                    state.fencing,
                    watch.cancelled,
                    emit_output=sink.emit,
                    checkpoint=sink.checkpoint,
                )
                returned = await _call_adapter(adapter, call_input, watch)
            finally:
                await watch.stop()
    except StoreError:
        raise
    except Exception as exc:
        raise Escaped(state, adapter_called=True) from exc
    try:
        await sink.flush()
        if services.faults.plan:
            await services.faults.hit("after_side_effect")
    except StoreError:
        raise
    except Exception as exc:
        raise Escaped(_executed(state, returned, trail), adapter_called=True) from exc
    done = Trail(trail.execution_id, (*trail.events, *sink.kept), sink.next_seq)
    return _executed(state, returned, done)


def _executed(state: Started, returned: AdapterOutcome | ToolgateError, trail: Trail) -> Executed:
    finished_ms = int(time.time() * 1000)
    return Executed(
        state.call, state.record, state.fencing, state.started_ms, finished_ms, returned, trail
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

    def __init__(self, services: Services, state: Started, sink: OutputSink) -> None:
        self._services, self._sink = services, sink
        self._execution_id, self._fencing = state.call.ticket.execution_id, state.fencing
        self.grace = services.settings.cancel_grace
        self._began = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._done: anyio.Event | None = None
        self._stopped = False
        self.scope: anyio.CancelScope | None = None
        """The adapter's scope, cancelled at the cut-off."""
        self.cut_off = False
        self.cancelled = services.cancellations.register(self._execution_id, self.start)
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
        self._services.cancellations.unregister(self._execution_id)
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
        services, execution_id = self._services, self._execution_id
        lease = services.settings.lock_lease
        last_renew = self._began
        wait = first_wait
        while True:
            await anyio.sleep(wait)
            wait = WATCH_INTERVAL
            try:
                record = await services.store.get_execution(execution_id)
                if record is not None and record.status is Status.CANCELLING:
                    self.cancelled.set()
                if time.monotonic() - last_renew >= lease / 3:
                    last_renew = time.monotonic()
                    await services.store.heartbeat(execution_id)
                    if self._fencing:
                        await services.store.renew_locks(execution_id, lease)
            except ToolgateError:
                log.warning("could not renew the leases of %s", execution_id)


def _cancelled_before_start(state: Locked, next_seq: int) -> Settled:
    """``state`` as it was before ``tool.started`` (whose number stays used), cancelled."""
    error = ExecutionError("cancelled before the adapter started", code="cancelled")
    trail = Trail(state.trail.execution_id, state.trail.events, next_seq)
    return ended_before_start(state, Outcome.CANCELLED, error, trail)


def _no_time_left(state: Started) -> Settled:
    tool = state.call.tool
    error = ExecutionError(
        f"{tool.ref} reached its adapter with no time left before its deadline "
        "(after validation and locks); nothing was started: send a later deadline",
        code="deadline_exceeded",
        retryable=True,
    )
    return ended_before_start(state, Outcome.FAILED, error)


_IMMEDIATE: dict[type, bool] = {}
"""Whether an adapter class is ``Immediate`` (a Protocol's isinstance is slow: once a class)."""


def _now_or_never(
    services: Services, state: Started, adapter: Adapter, sink: OutputSink
) -> AdapterOutcome | ToolgateError | None:
    """The outcome of an ``Immediate`` adapter that finished the call at once, or None (the
    call then takes the general path). Nothing here waits, so there is nothing for the
    watchers, the cancel scope or the deadline's timer to interrupt: a cancel or the
    deadline could not stop a call that never yields to the event loop anyway."""
    kind = type(adapter)
    immediate = _IMMEDIATE.get(kind)
    if immediate is None:
        immediate = _IMMEDIATE[kind] = isinstance(adapter, Immediate)
    if not immediate:
        return None
    call = adapter_call(
        services,
        state.call,
        state.fencing,
        emit_output=sink.emit,
        checkpoint=sink.checkpoint,
    )
    try:
        return adapter.execute_now(call)  # type: ignore[attr-defined]
    except Exception as exc:
        return _failure(call, exc)


async def _call_adapter(
    adapter: Adapter, call: AdapterCall, watch: _Watch
) -> AdapterOutcome | ToolgateError:
    """The adapter's outcome, or its failure translated into the error tree.

    The adapter runs in this task, in one cancel scope: its deadline, and the watch's
    cut-off after a cancel's grace period (the loop's clock is anyio's on asyncio)."""
    tool = call.tool
    now = asyncio.get_running_loop().time()
    scope = watch.scope = anyio.CancelScope(deadline=now + max(call.seconds_left(), 0.0))
    with scope:
        try:
            return await adapter.execute(call)
        except Exception as exc:
            return _failure(call, exc)
    if not watch.cut_off:
        return _timeout(tool)  # the deadline cancelled the scope
    return ExecutionError(
        f"{tool.ref} was cancelled and did not stop within {watch.grace:g} s; it was cut off",
        code="cancelled",
    )


def _failure(call: AdapterCall, exc: Exception) -> ToolgateError:
    """What an adapter raised, translated into the error tree."""
    tool = call.tool
    if isinstance(exc, TimeoutError):
        return _timeout(tool)
    if isinstance(exc, ToolgateError):
        return exc
    log.exception("adapter %s failed in execution %s", tool.adapter, call.execution_id)
    return ExecutionError(
        f"the {tool.adapter} adapter failed unexpectedly ({type(exc).__name__}); "
        f"see the gateway log for execution {call.execution_id}",
        code="adapter_crashed",
    )


def _timeout(tool: ToolDeclaration) -> ToolgateError:
    return ExecutionError(
        f"{tool.ref} did not finish before its deadline (timeout)",
        code="timeout",
        retryable=True,
    )
