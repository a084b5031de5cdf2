"""``Telemetry``: the operator-facing parts a runtime carries, each ``None`` when off, so a
call pays for exactly what is switched on (one attribute read for what is not)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.observability.decisions import DecisionLog
from gateway.observability.metrics import Metrics

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from gateway.observability.tracing import Tracing

OTEL_EXPORTER_VARIABLES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
"""Any of these set turns tracing on without ``tracing.enabled`` (``OTEL_SDK_DISABLED=true``
or ``OTEL_TRACES_EXPORTER=none`` keep it off)."""


@dataclass(frozen=True, slots=True)
class Telemetry:
    metrics: Metrics | None = None
    tracing: Tracing | None = None
    decisions: DecisionLog | None = None

    def close(self) -> None:
        if self.decisions is not None:
            self.decisions.close()
        if self.tracing is not None:
            self.tracing.shutdown()  # flushes what the batch processor holds


OFF = Telemetry()


def tracing_wanted(enabled: bool, env: Mapping[str, str]) -> bool:
    """Whether to trace: the setting, or an exporter named by the standard variables."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return enabled or any(env.get(name) for name in OTEL_EXPORTER_VARIABLES)
