"""OpenTelemetry spans (the ``tracing`` extra): the execution's span and its stages' under
the caller's trace, and the same trace at a real upstream on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from gateway.observability import tracing
from gateway.server.app import create_app
from gateway.settings import Settings, TracingSettings
from tests.helpers import REPO
from tests.server.helpers import auth, body

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = int(PARENT.split("-")[1], 16)
PARENT_SPAN = int(PARENT.split("-")[2], 16)


class _Recorder(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self.server.seen.append(self.headers.get("traceparent"))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def upstream() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.daemon_threads = True
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    monkeypatch.setattr(tracing, "_exporter", lambda env: exporter)
    return exporter


def test_spans_sit_under_the_callers_trace_and_the_upstream_sees_it(
    project: Path, settings: Settings, upstream: Any, spans: InMemorySpanExporter
) -> None:
    port = upstream.server_address[1]
    (project / "tools.d" / "t.trace_read.yaml").write_text(
        "name: t.trace_read\nversion: 1.0.0\ndescription: test\nadapter: http\n"
        "operation: request\nrisk: low\nside_effect: read\nmethod: GET\n"
        f"url: http://127.0.0.1:{port}/seen\negress: {{allow_networks: [127.0.0.1/32]}}\n"
    )
    traced = settings.model_copy(update={"tracing": TracingSettings(enabled=True)})
    with TestClient(create_app(traced), raise_server_exceptions=False) as client:
        response = client.post(
            "/v1/executions",
            json=body("t.trace_read", {}),
            headers={**auth(), "traceparent": PARENT},
        )
        assert response.json()["result"]["outcome"] == "succeeded", response.text
        execution_id = response.json()["id"]
    finished = spans.get_finished_spans()  # the runtime's close flushed the batch
    (execution,) = [s for s in finished if s.name == "toolgate.execution"]
    assert execution.context.trace_id == TRACE_ID
    assert execution.parent is not None and execution.parent.span_id == PARENT_SPAN
    assert execution.attributes is not None
    assert execution.attributes["toolgate.execution_id"] == execution_id
    assert execution.attributes["toolgate.outcome"] == "succeeded"
    stages = {s.name: s for s in finished if s.name.startswith("toolgate.stage.")}
    assert {"toolgate.stage.policy", "toolgate.stage.execute", "toolgate.stage.commit"} <= set(
        stages
    )
    for stage in stages.values():
        assert stage.context.trace_id == TRACE_ID
        assert stage.parent is not None and stage.parent.span_id == execution.context.span_id
    (sent,) = upstream.seen
    assert sent == f"00-{TRACE_ID:032x}-{execution.context.span_id:016x}-01"


@pytest.mark.slow  # starts a process itself
def test_no_opentelemetry_sdk_is_loaded_when_tracing_is_off(settings: Settings) -> None:
    script = (
        "import sys, anyio\n"
        "from pathlib import Path\n"
        "from gateway.runtime.bootstrap import open_runtime, close_runtime\n"
        "from gateway.settings import load_settings\n"
        "async def main():\n"
        f"    s = load_settings(Path({str(settings.config_file)!r}), env={{}},"
        f" database_url={settings.database_url!r})\n"
        "    r = await open_runtime(s)\n"
        "    assert r.telemetry.tracing is None and r.telemetry.metrics is not None\n"
        "    await close_runtime(r)\n"
        "anyio.run(main)\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk'))\n"
        "assert not loaded, loaded\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_standard_variables_turn_tracing_on_and_off() -> None:
    from gateway.observability.telemetry import tracing_wanted

    assert not tracing_wanted(False, {})
    assert tracing_wanted(True, {})
    assert tracing_wanted(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_wanted(False, {"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing_wanted(True, {"OTEL_SDK_DISABLED": "true"})
    assert not tracing_wanted(True, {"OTEL_TRACES_EXPORTER": "none"})
