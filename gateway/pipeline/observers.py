"""What watches a call go through the stages: metrics and tracing, as observers of the one
stage driver (``runner.drive``).

The driver is the same loop whatever is switched on; what telemetry adds wraps it, as
temporalio chains interceptors: each observer wraps the one inside it (``inner``) and passes
every stage on, and the innermost, ``UNOBSERVED``, watches nothing and runs the stage. With
telemetry off a call has only that one; metrics on wraps it in ``Timed``; tracing on wraps
that in ``Traced`` (``observing``). An observer watches one call: it is made for each.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from gateway.observability.metrics import Metrics
from gateway.observability.telemetry import Telemetry
from gateway.pipeline.records import Ended, Requested, Settled, State, ToolResult, Working
from gateway.pipeline.services import Services
from gateway.store.records import ExecutionRecord

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from opentelemetry.trace import Span

    from gateway.observability.tracing import Tracing
    from gateway.pipeline.runner import Stage

Step = Callable[["Stage[Any]", Services, Working, str], Awaitable[State]]
"""How a driver runs one stage: ``(stage, services, state, execution_id)`` → the next state.
A call's step is the runner's catch-all (``runner._run_stage``); a plan and a rebuild have
their own."""

_UNWATCHED = nullcontext()


class Observer:
    """The observer that watches nothing: it runs each stage with the driver's step. Every
    chain ends with it (``UNOBSERVED``)."""

    __slots__ = ()

    def watching(self, state: Requested) -> AbstractContextManager[object]:
        """Held around the whole call (``state`` is where it starts)."""
        return _UNWATCHED

    def stage(
        self, stage: Stage[Any], services: Services, state: Working, execution_id: str, step: Step
    ) -> Awaitable[State]:
        """Run ``stage`` on ``state`` (through the observers inside this one). Here the
        step's own awaitable, not a coroutine around it: an unobserved stage costs a call."""
        return step(stage, services, state, execution_id)

    def ended(self, state: State) -> None:
        """The driver stopped at ``state`` (not called when an exception left it)."""


UNOBSERVED = Observer()


class Around(Observer):
    """An observer wrapped around ``inner``: it keeps the call's execution id and the last
    result a stage settled (what the call's end is counted and traced with)."""

    __slots__ = ("execution_id", "inner", "last")

    def __init__(self, inner: Observer) -> None:
        self.inner = inner
        self.execution_id = ""
        self.last: ToolResult | None = None

    def watching(self, state: Requested) -> AbstractContextManager[object]:
        self.execution_id = state.ticket.execution_id
        return self.inner.watching(state)

    def ended(self, state: State) -> None:
        self.inner.ended(state)

    def _settled(self, state: State) -> State:
        if isinstance(state, Settled):
            self.last = state.result
        return state

    def _own_end(self, state: State) -> ExecutionRecord | None:
        """The execution the call ended as, unless it is another one (a replay of an
        existing execution is not counted or traced as a new end)."""
        if isinstance(state, Ended) and state.record.id == self.execution_id:
            return state.record
        return None


class Timed(Around):
    """Metrics: each stage timed (``toolgate_stage_duration_seconds``) and the call's end
    counted (``toolgate_executions``; a parked call when it ends)."""

    __slots__ = ("metrics",)

    def __init__(self, metrics: Metrics, inner: Observer = UNOBSERVED) -> None:
        super().__init__(inner)
        self.metrics = metrics

    async def stage(
        self, stage: Stage[Any], services: Services, state: Working, execution_id: str, step: Step
    ) -> State:
        start = time.perf_counter()
        current = await self.inner.stage(stage, services, state, execution_id, step)
        self.metrics.stage(stage.name, time.perf_counter() - start)
        return self._settled(current)

    def ended(self, state: State) -> None:
        self.inner.ended(state)
        record = self._own_end(state)
        if record is not None and record.terminal:
            error = self.last.error if self.last is not None else None
            phase = error.phase.value if error is not None and error.phase else ""
            self.metrics.execution(record.tool_name, record.outcome or "", phase)


class Traced(Around):
    """Tracing: a span for the execution, under the caller's ``traceparent``, a span for
    each stage under it, and the call's outcome on the execution's span."""

    __slots__ = ("span", "tracing")

    def __init__(self, tracing: Tracing, inner: Observer = UNOBSERVED) -> None:
        super().__init__(inner)
        self.tracing = tracing
        self.span: Span | None = None

    @contextmanager
    def watching(self, state: Requested) -> Iterator[object]:
        ticket = state.ticket
        request = ticket.request
        attributes = {
            "toolgate.execution_id": ticket.execution_id,
            "toolgate.run_id": request.run_id,
            "toolgate.call_id": request.call_id,
            "toolgate.tool": request.tool_name,
            "toolgate.principal": request.principal,
        }
        with (
            self.tracing.execution(request.traceparent, attributes) as span,
            super().watching(state),
        ):
            self.span = span
            yield span

    async def stage(
        self, stage: Stage[Any], services: Services, state: Working, execution_id: str, step: Step
    ) -> State:
        with self.tracing.stage(stage.name):
            current = await self.inner.stage(stage, services, state, execution_id, step)
        return self._settled(current)

    def ended(self, state: State) -> None:
        self.inner.ended(state)
        record = self._own_end(state)
        if record is not None and self.span is not None:
            shown = record.outcome if record.terminal else str(record.status)
            error = self.last.error if self.last is not None else None
            self.tracing.ended(self.span, shown, error.code if error else None)


def observing(telemetry: Telemetry) -> Observer:
    """The observers of one call, as ``telemetry`` switches them on, outermost first."""
    observer = UNOBSERVED
    if telemetry.metrics is not None:
        observer = Timed(telemetry.metrics, observer)
    if telemetry.tracing is not None:
        observer = Traced(telemetry.tracing, observer)
    return observer
