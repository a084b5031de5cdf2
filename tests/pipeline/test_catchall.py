"""No exception leaves an execution non-terminal: one injected into every stage, at every
fault point and into every probe (verify, reconcile, recovery's reconcile) ends the call
terminal, committed, with the outcome and ``attempted`` flag the truth allows."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.adapters.base import AdapterCall, AdapterOutcome
from gateway.declarations.catalogue import Catalogue
from gateway.faults import POINTS, Faults
from gateway.observability.telemetry import Telemetry
from gateway.pipeline import runner
from gateway.pipeline.records import State
from gateway.pipeline.runner import STAGES, Stage, run_call
from gateway.pipeline.services import Services
from gateway.runtime.recovery import recover
from gateway.store.records import ExecutionRecord
from gateway.store.store import Store
from gateway.types import JSON, Status
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    ok,
    request,
    sha_probe,
)

pytestmark = pytest.mark.anyio
HI = hashlib.sha256(b"hi").hexdigest()
SECRET = "raw-exception-text-must-not-show"
BEFORE_THE_ADAPTER = ("resolve", "normalise", "validate", "policy", "reserve", "lock", "execute")

RAISED_AT = {
    "after_reserve": ("failed", False),
    "before_adapter": ("failed", False),
    # The adapter ran; its result was lost: the reconcile probe finds the content.
    "after_side_effect": ("succeeded", True),
    "during_verify": ("unknown", True),
    "before_commit": ("unknown", True),
    "after_commit": ("succeeded", True),  # committed before the fault: it stands
}
"""Fault point → the (outcome, attempted) a ``raise`` there ends a reconcilable write with
(docs/failures.md, chaos testing: ``raise``)."""


class Boom(RuntimeError):
    """What a gateway bug raises."""


def raising_instead_of(name: str) -> tuple[Stage[Any], ...]:
    async def boom(services: Services, state: Any) -> State:
        raise Boom(SECRET)

    return tuple(replace(s, run=boom) if s.name == name else s for s in STAGES)


async def crashing_probe(name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
    raise Boom(SECRET)


async def crash(call: AdapterCall) -> AdapterOutcome:
    raise Boom(SECRET)


async def assert_settled(
    store: Store, record: ExecutionRecord, outcome: str, attempted: bool
) -> dict[str, Any]:
    stored = await store.get_execution(record.id)
    assert stored is not None and stored.status is Status.COMPLETED, stored
    assert stored.outcome == outcome, stored.result
    result = stored.result
    assert result is not None and result["side_effect"]["attempted"] is attempted, result
    assert SECRET not in (stored.result_json or "")  # the raw exception text stays in the log
    assert await store.unfinished([Status.RUNNING, Status.CANCELLING, Status.QUEUED]) == []
    events = [e.type for e in await store.events(record.id)]
    assert events[-1] == "tool.completed"
    return result


def assert_observed(telemetry: Telemetry, spans: InMemorySpanExporter, outcome: str) -> None:
    """The observers on saw the end the catch-all settled: metrics counted it once, the
    execution's span carries its outcome."""
    if telemetry.metrics is not None:
        counted = telemetry.metrics.executions.values
        assert [(k[:2], n) for k, n in counted.items()] == [(("fs.write_file", outcome), 1)]
    if telemetry.tracing is not None:
        ended = [s for s in spans.get_finished_spans() if s.name == "toolgate.execution"]
        assert [(s.attributes or {}).get("toolgate.outcome") for s in ended] == [outcome]


@pytest.mark.parametrize("stage", [s.name for s in STAGES])
async def test_an_exception_in_any_stage_ends_the_call_truthfully(
    tmp_path: Path,
    store: Store,
    catalogue: Catalogue,
    telemetry: Telemetry,
    spans: InMemorySpanExporter,
    stage: str,
) -> None:
    adapter = FunctionAdapter(ok, sha_probe(HI))
    services = make_services(
        tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all), telemetry
    )
    record = await run_call(services, request(), raising_instead_of(stage))
    if stage in BEFORE_THE_ADAPTER:
        result = await assert_settled(store, record, "failed", attempted=False)
        assert adapter.calls == []
    else:  # the adapter wrote: settle, verify or commit failing cannot make it "failed"
        result = await assert_settled(store, record, "unknown", attempted=True)
        assert len(adapter.calls) == 1
    assert result["error"]["type"] == "internal_error"
    assert f"stage {stage}" in result["error"]["message"]
    assert_observed(telemetry, spans, result["outcome"])


@pytest.mark.parametrize("point", sorted(POINTS))
async def test_a_raise_at_every_fault_point_ends_the_call_truthfully(
    tmp_path: Path,
    store: Store,
    catalogue: Catalogue,
    telemetry: Telemetry,
    spans: InMemorySpanExporter,
    point: str,
) -> None:
    adapter = FunctionAdapter(ok, sha_probe(HI))
    services = make_services(
        tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all), telemetry
    )
    faulty = replace(services, faults=Faults.parse(f"{point}:raise"))
    record = await run_call(faulty, request())
    expected = RAISED_AT[point]
    await assert_settled(store, record, *expected)
    assert len(adapter.calls) == (0 if point in ("after_reserve", "before_adapter") else 1)
    assert_observed(telemetry, spans, expected[0])


async def test_an_exception_after_the_side_effect_is_reconciled_absent(
    tmp_path: Path, store: Store, catalogue: Catalogue, telemetry: Telemetry
) -> None:
    adapter = FunctionAdapter(ok, sha_probe("not-there"))
    services = make_services(
        tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all), telemetry
    )
    faulty = replace(services, faults=Faults.parse("after_side_effect:raise"))
    record = await run_call(faulty, request())
    result = await assert_settled(store, record, "failed", attempted=True)
    assert result["side_effect"]["summary"] == "reconciled: the side effect did not happen"


async def test_a_verify_probe_that_raises_is_unknown(
    tmp_path: Path, store: Store, catalogue: Catalogue, telemetry: Telemetry
) -> None:
    adapter = FunctionAdapter(ok, crashing_probe)
    services = make_services(
        tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all), telemetry
    )
    record = await run_call(services, request())
    result = await assert_settled(store, record, "unknown", attempted=True)
    assert result["error"]["type"] == "verification_unavailable"
    [probe] = [e for e in result["evidence"] if e["kind"] == "probe"]
    assert "Boom" in probe["error"]


async def test_a_reconcile_probe_that_raises_is_unknown(
    tmp_path: Path, store: Store, catalogue: Catalogue, telemetry: Telemetry
) -> None:
    adapter = FunctionAdapter(crash, crashing_probe)
    services = make_services(
        tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all), telemetry
    )
    record = await run_call(services, request())
    result = await assert_settled(store, record, "unknown", attempted=True)
    assert result["error"]["type"] == "adapter_crashed"


async def test_a_reconcile_probe_that_raises_in_recovery_is_unknown(
    tmp_path: Path, store: Store, catalogue: Catalogue, telemetry: Telemetry
) -> None:
    adapter = FunctionAdapter(ok, crashing_probe)
    services = make_services(
        tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all), telemetry
    )
    # The store fails after the side effect: the call is left running for recovery.
    faulty = replace(services, faults=Faults.parse("after_side_effect:store_unavailable"))
    with pytest.raises(Exception, match="store is unavailable"):
        await run_call(faulty, request())
    [left] = await store.unfinished([Status.RUNNING])
    [settled] = await recover(services)
    assert settled.id == left.id
    await assert_settled(store, settled, "unknown", attempted=True)


async def test_recovery_settles_an_execution_whose_rebuild_raises(
    tmp_path: Path,
    store: Store,
    catalogue: Catalogue,
    telemetry: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adapter = FunctionAdapter(ok, sha_probe(HI))
    services = make_services(
        tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all), telemetry
    )
    faulty = replace(services, faults=Faults.parse("after_side_effect:store_unavailable"))
    with pytest.raises(Exception, match="store is unavailable"):
        await run_call(faulty, request())
    # what pipeline.rebuild runs: its normalise raises
    monkeypatch.setattr(runner, "REBUILT", raising_instead_of("normalise")[:2])
    [settled] = await recover(services)
    await assert_settled(store, settled, "unknown", attempted=True)


@pytest.mark.parametrize("point", sorted(POINTS))
def test_the_http_answer_is_never_5xx_and_the_execution_terminal(
    project: Path, tmp_path: Path, point: str
) -> None:
    from starlette.testclient import TestClient

    from gateway.server.app import create_app
    from gateway.settings import load_settings
    from tests.server.helpers import auth, body

    settings = load_settings(
        project / "toolgate.yaml",
        env={},
        database_url=f"sqlite:///{tmp_path / 'gw.db'}",
        faults=f"{point}:raise",
    )
    payload = body("fs.write_file", {"path": "c.txt", "content": "hi"}, idempotency_key="k1")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        first = client.post("/v1/executions", json=payload, headers=auth())
        assert first.status_code == 200, first.text
        execution = first.json()
        assert execution["status"] == "completed", execution
        outcome, attempted = RAISED_AT[point]
        assert execution["result"]["outcome"] == outcome, execution["result"]
        assert execution["result"]["side_effect"]["attempted"] is attempted
        assert SECRET not in first.text and "Traceback" not in first.text
        replay = client.post("/v1/executions", json=payload, headers=auth())
        assert replay.status_code == 200 and replay.json()["id"] == execution["id"]
        again = client.get(f"/v1/executions/{execution['id']}", headers=auth())
        assert again.json()["status"] == "completed"
