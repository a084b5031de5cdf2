"""W3C trace context through the REST door: the ``traceparent`` of ``POST /v1/executions``
(or a new trace) reaches a real upstream HTTP server on 127.0.0.1 as a child span, also when
the call runs later: resumed after an approval, or dequeued by a worker."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway import tracecontext
from gateway.server.app import create_app
from gateway.settings import Settings
from tests.helpers import BOB
from tests.server.helpers import auth, body

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = PARENT.split("-")[1]
SHAPE = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


class _Recorder(BaseHTTPRequestHandler):
    server: _Upstream

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _answer(self) -> None:
        self.server.seen.append(self.headers.get_all("traceparent") or [])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = _answer


class _Upstream(ThreadingHTTPServer):
    daemon_threads = True
    seen: list[list[str]]


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream(("127.0.0.1", 0), _Recorder)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def _tool(name: str, port: int, risk: str, method: str, side_effect: str) -> str:
    return (
        f"name: {name}\nversion: 1.0.0\ndescription: test\nadapter: http\noperation: request\n"
        f"risk: {risk}\nside_effect: {side_effect}\nmethod: {method}\n"
        f"url: http://127.0.0.1:{port}/seen\negress: {{allow_networks: [127.0.0.1/32]}}\n"
    )


@pytest.fixture
def client(project: Path, settings: Settings, upstream: _Upstream) -> Iterator[TestClient]:
    port = upstream.server_address[1]
    tools = project / "tools.d"
    (tools / "t.trace_read.yaml").write_text(_tool("t.trace_read", port, "low", "GET", "read"))
    (tools / "t.trace_post.yaml").write_text(
        _tool("t.trace_post", port, "high", "POST", "external")  # high risk: needs approval
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def _sent(upstream: _Upstream) -> str:
    """The one traceparent of the one request the upstream got."""
    assert len(upstream.seen) == 1 and len(upstream.seen[0]) == 1, upstream.seen
    sent = upstream.seen[0][0]
    assert SHAPE.fullmatch(sent), sent
    return sent


def _is_child_of(sent: str, parent: str) -> bool:
    _, trace_id, span_id, flags = sent.split("-")
    _, parent_trace, parent_span, parent_flags = parent.split("-")
    return (trace_id, flags) == (parent_trace, parent_flags) and span_id != parent_span


def _run(client: TestClient, tool: str, **headers: str) -> dict[str, Any]:
    response = client.post("/v1/executions", json=body(tool, {}), headers={**auth(), **headers})
    # respond-async answers 202 queued; a plain call of these reads completes: 200
    assert response.status_code == (202 if "prefer" in headers else 200), response.text
    done = client.get(response.json()["links"]["self"] + "?wait=10", headers=auth())
    assert done.status_code == 200, done.text
    assert done.json()["result"]["outcome"] == "succeeded", done.json()["result"]
    return dict(done.json())


def test_the_upstream_gets_a_child_of_the_requests_traceparent(
    client: TestClient, upstream: _Upstream
) -> None:
    _run(client, "t.trace_read", traceparent=PARENT)
    sent = _sent(upstream)
    assert _is_child_of(sent, PARENT), sent


def test_without_a_traceparent_each_execution_starts_a_trace(
    client: TestClient, upstream: _Upstream
) -> None:
    _run(client, "t.trace_read")
    _run(client, "t.trace_read")
    sent = [headers[0] for headers in upstream.seen]
    assert all(SHAPE.fullmatch(s) for s in sent), sent
    assert len({s.split("-")[1] for s in sent}) == 2, sent


@pytest.mark.parametrize(
    "malformed",
    [
        "garbage",
        PARENT.upper(),
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        PARENT + "-extra",
        PARENT[:-1],
    ],
)
def test_a_malformed_traceparent_is_ignored(
    client: TestClient, upstream: _Upstream, malformed: str
) -> None:
    _run(client, "t.trace_read", traceparent=malformed)
    assert _sent(upstream).split("-")[1] != TRACE_ID


def test_a_resumed_call_keeps_the_trace_of_its_request(
    client: TestClient, upstream: _Upstream
) -> None:
    parked = client.post(
        "/v1/executions",
        json=body("t.trace_post", {}),
        headers={**auth(), "traceparent": PARENT},
    )
    assert parked.status_code == 202 and parked.json()["status"] == "awaiting_approval"
    approval_id = parked.json()["approval"]["id"]
    other = tracecontext.new()  # the approver's own trace is not the call's
    decided = client.post(
        f"/v1/approvals/{approval_id}/approve", headers={**auth(BOB), "traceparent": other}
    )
    assert decided.status_code == 202, decided.text
    done = client.get(parked.json()["links"]["self"] + "?wait=10", headers=auth())
    assert done.json()["result"]["outcome"] == "succeeded", done.json()["result"]
    assert _is_child_of(_sent(upstream), PARENT)


def test_a_dequeued_call_keeps_the_trace_of_its_request(
    client: TestClient, upstream: _Upstream
) -> None:
    done = _run(client, "t.trace_read", traceparent=PARENT, prefer="respond-async")
    events = client.get(done["links"]["events"], headers=auth()).json()["items"]
    assert any(e["data"].get("dequeued") for e in events), events  # a worker ran it
    assert _is_child_of(_sent(upstream), PARENT)
