"""Fixtures of the pipeline's unit tests: the shipped catalogue, a real SQLite store, and the
runtime of a call that succeeds and is allowed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.declarations.catalogue import Catalogue
from gateway.observability.metrics import Metrics
from gateway.observability.telemetry import OFF, Telemetry
from gateway.pipeline.services import Services
from gateway.store.store import Store
from gateway.testing import load_catalogue
from tests.helpers import REPO
from tests.pipeline.fakes import FunctionAdapter, FunctionPolicy, allow_all, make_services, ok


@pytest.fixture
def catalogue() -> Catalogue:
    return load_catalogue(REPO / "tools.d")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    await s.open()
    yield s
    await s.aclose()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """Where the ``telemetry`` fixture's tracing puts the spans it ends."""
    return InMemorySpanExporter()


@pytest.fixture(params=["off", "metrics", "tracing"])
def telemetry(request: pytest.FixtureRequest, spans: InMemorySpanExporter) -> Telemetry:
    """Each configuration the stage driver runs under: telemetry off, metrics on (the
    default), tracing on (with metrics, so both observers are chained)."""
    if request.param == "off":
        return OFF
    if request.param == "metrics":
        return Telemetry(metrics=Metrics())
    from gateway.observability.tracing import Tracing

    return Telemetry(metrics=Metrics(), tracing=Tracing(exporter=spans))


@pytest.fixture
def services(tmp_path: Path, store: Store, catalogue: Catalogue) -> Services:
    """The runtime most stage tests need: an adapter that succeeds, a policy that allows."""
    return make_services(tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all))
