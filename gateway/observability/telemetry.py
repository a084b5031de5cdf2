"""``Telemetry``: the operator-facing parts a runtime carries, each ``None`` when off, so a
call pays for exactly what is switched on (one attribute read for what is not)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.observability.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Telemetry:
    metrics: Metrics | None = None


OFF = Telemetry()
