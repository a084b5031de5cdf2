"""Log lines: ``log_format: json``, one JSON object a line naming the call; ``text``, one line
for people; no secret in any line of either."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.observability import logs
from gateway.observability.logs import JsonFormatter
from gateway.server.app import create_app
from gateway.settings import Settings
from tests.server.helpers import auth, body

CANARY = "canary-secret-5f0c1e9a77d24b1d"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:  # echoes the credential back, and fails
        echoed = json.dumps({"auth": self.headers.get("Authorization")}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(echoed)))
        self.end_headers()
        self.wfile.write(echoed)


@pytest.fixture
def upstream() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def text_lines() -> Iterator[io.StringIO]:
    """What ``toolgate serve`` sets up for ``log_format: text`` at ``--log-level debug``."""
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    logs.configure("text", "debug", out)
    yield out
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def _secret_tool(project: Path, upstream: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTP tool sending the canary as its credential to ``upstream``, which echoes it."""
    monkeypatch.setenv("TG_TEST_CANARY", CANARY)
    port = upstream.server_address[1]
    (project / "tools.d" / "t.secret_read.yaml").write_text(
        "name: t.secret_read\nversion: 1.0.0\ndescription: test\nadapter: http\n"
        "operation: request\nrisk: low\nside_effect: read\nmethod: GET\n"
        f"url: http://127.0.0.1:{port}/x\negress: {{allow_networks: [127.0.0.1/32]}}\n"
        "credentials: [{header: Authorization, prefix: 'Bearer ', env: TG_TEST_CANARY}]\n"
    )


def test_json_lines_name_the_call_and_hold_no_secret(
    project: Path,
    settings: Settings,
    upstream: Any,
    lines: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _secret_tool(project, upstream, monkeypatch)
    as_json = settings.model_copy(update={"log_format": "json"})
    with TestClient(create_app(as_json), raise_server_exceptions=False) as client:
        response = client.post(
            "/v1/executions",
            json=body("t.secret_read", {}, run_id="run-logs"),
            headers={**auth(), "traceparent": PARENT},
        )
        assert response.status_code == 200, response.text
        assert CANARY not in response.text  # the adapter redacts what it returns
        execution_id = response.json()["id"]
        # whatever logs a secret the adapter read, it is masked
        logging.getLogger("toolgate.test").warning("leaked %s in a message", CANARY)
    text = lines.getvalue()
    assert CANARY not in text
    records = [json.loads(line) for line in text.splitlines()]  # every line is one object
    ended = [r for r in records if r.get("logger") == "toolgate.pipeline"]
    assert ended, text
    line = ended[-1]
    assert line["execution_id"] == execution_id and line["run_id"] == "run-logs"
    assert line["tool"] == "t.secret_read" and line["principal"] == "alice"
    assert line["trace_id"] == PARENT.split("-")[1]
    assert line["call_id"] and line["level"] == "info" and line["outcome"] == "failed"
    assert any("[REDACTED]" in r["message"] for r in records if r["logger"] == "toolgate.test")


def test_text_lines_at_debug_hold_no_secret(
    project: Path,
    settings: Settings,
    upstream: Any,
    text_lines: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _secret_tool(project, upstream, monkeypatch)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.post(
            "/v1/executions", json=body("t.secret_read", {}, run_id="run-text"), headers=auth()
        )
        assert response.status_code == 200, response.text
        assert response.json()["result"]["outcome"] == "failed"  # the upstream answered 500
        logging.getLogger("toolgate.test").warning("leaked %s in a message", CANARY)
        try:
            raise RuntimeError(f"failed with {CANARY}")
        except RuntimeError:
            logging.getLogger("toolgate.test").exception("a traceback")
    text = text_lines.getvalue()
    assert CANARY not in text
    assert "WARNING  toolgate.test: leaked [REDACTED] in a message" in text
    assert "RuntimeError: failed with [REDACTED]" in text
    assert any(" DEBUG    " in line for line in text.splitlines()), text  # DEBUG was on
    assert not text.lstrip().startswith("{")  # text, not JSON
