"""OpenTelemetry spans: one per execution, one per stage under it (docs/operations.md#tracing).

Imported only when tracing is on (``tracing.enabled``, or an ``OTEL_*`` exporter variable
set: ``wanted``), so the optional ``tracing`` extra is needed only then. The execution's span
is a child of the request's stored ``traceparent`` (REST header or MCP ``_meta``), and its
own context is what adapter calls send upstream (``traceparent``), so an upstream service
records its work under the gateway's span. Export is OTLP over HTTP, configured by the
standard ``OTEL_*`` variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ...);
``OTEL_TRACES_EXPORTER=console`` prints spans instead, ``none`` exports nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_EXECUTION: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "toolgate_execution_span", default=None
)


class Tracing:
    """A tracer provider of the gateway's own (not the process-global one)."""

    def __init__(self, exporter: SpanExporter | None = None, env: Mapping[str, str] = {}):
        """Spans go to ``exporter`` as each ends (tests: an in-memory exporter), else in
        batches to the exporter the ``OTEL_*`` variables of ``env`` name."""
        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "toolgate")})
        self.provider = TracerProvider(resource=resource)
        if exporter is not None:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        elif (chosen := _exporter(env)) is not None:
            self.provider.add_span_processor(BatchSpanProcessor(chosen))
        self.tracer = self.provider.get_tracer("toolgate")

    @contextlib.contextmanager
    def execution(self, traceparent: str | None, attributes: Mapping[str, Any]) -> Iterator[Span]:
        """The execution's span, current (and the one adapter calls name upstream) inside."""
        parent = _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None
        with self.tracer.start_as_current_span(
            "toolgate.execution", context=parent, kind=SpanKind.SERVER, attributes=dict(attributes)
        ) as span:
            token = _EXECUTION.set(span)
            try:
                yield span
            finally:
                _EXECUTION.reset(token)

    def stage(self, name: str) -> contextlib.AbstractContextManager[Span]:
        return self.tracer.start_as_current_span(f"toolgate.stage.{name}")

    @staticmethod
    def ended(span: Span, outcome: str | None, error_code: str | None) -> None:
        span.set_attribute("toolgate.outcome", outcome or "")
        if error_code:
            span.set_attribute("toolgate.error", error_code)
        if outcome not in (None, "succeeded"):
            span.set_status(Status(StatusCode.ERROR, error_code or outcome))

    @staticmethod
    def traceparent() -> str | None:
        """The current execution span as a ``traceparent`` (None outside one)."""
        span = _EXECUTION.get()
        if span is None:
            return None
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier.get("traceparent")

    def shutdown(self) -> None:
        self.provider.shutdown()


def _exporter(env: Mapping[str, str]) -> SpanExporter | None:
    kind = env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip().lower()
    if kind == "none":
        return None
    if kind == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
