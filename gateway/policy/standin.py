"""A loopback stand-in for an OPA server, over the embedded engine (``toolgate policy serve-opa``).

For local development and tests where no OPA binary runs: it loads a bundle (``toolgate policy
bundle``) and speaks the part of OPA's REST API the gateway uses:

- ``POST /v1/data/{path}`` with ``{"input": ...}`` → ``200 {"result": ..., "decision_id": ...}``
  (``result`` absent when the document is undefined; ``provenance.bundles`` with the bundle's
  revision when ``?provenance=true``); a malformed body → 400, an evaluation error → 500, both
  with OPA's ``{"code", "message"}``;
- ``GET /health`` → ``200 {}``.

It is not OPA: one bundle, no decision logs, no discovery, no authentication. Each connection's
thread has its own regorus engine (an engine is bound to the thread that made it).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gateway.policy import bundle as bundles
from gateway.policy.loader import EngineError, PolicySources, engine_call, new_engine

BUNDLE_NAME = "toolgate"


class StandIn:
    """The server: ``start()`` serves on a thread, ``stop()`` ends it."""

    def __init__(
        self, sources: PolicySources, revision: str, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.sources, self.revision = sources, revision
        self._data_json = sources.data_json()
        self._local = threading.local()
        self.requests = 0
        """Data API requests answered (for tests and benchmarks)."""
        self.server = _Server((host, port), _handler(self))
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @classmethod
    def from_bundle(cls, data: bytes, host: str = "127.0.0.1", port: int = 0) -> StandIn:
        files = bundles.read(data)
        manifest = json.loads(files.get(bundles.MANIFEST, b"{}"))
        return cls(bundles.sources_of(files), str(manifest.get("revision", "")), host, port)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> StandIn:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.server.close_connections()
        if self._thread is not None:
            self._thread.join()

    def evaluate(self, path: str, input_value: Any) -> Any:
        """The value of ``data.<path>`` (dots) for ``input_value``; ``"<undefined>"`` if none."""
        engine = getattr(self._local, "engine", None)
        if engine is None:
            engine = self._local.engine = new_engine(self.sources.modules, self._data_json)
        engine_call(engine.set_input_json, json.dumps(input_value))
        try:
            return json.loads(engine_call(engine.eval_rule_as_json, f"data.{path}"))
        except EngineError as exc:
            if "not a valid rule path" not in str(exc):
                raise
        # No rule there (a rule the bundle lacks, or data): OPA answers the document's value,
        # undefined when there is none, never an error.
        found = json.loads(engine_call(engine.eval_query_as_json, f"data.{path}"))
        for result in found.get("result") or ():
            return result["expressions"][0]["value"]
        return "<undefined>"

    def answer(self, method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request. Tests override it to misbehave."""
        parts = urlsplit(target)
        if method == "GET" and parts.path == "/health":
            return 200, "application/json", b"{}"
        if method != "POST" or not parts.path.startswith("/v1/data/"):
            return _error(404, "resource_not_found", f"{method} {parts.path}")
        path = ".".join(p for p in parts.path.removeprefix("/v1/data/").split("/") if p)
        try:
            request = json.loads(body or b"{}")
            if not isinstance(request, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as exc:
            return _error(400, "invalid_parameter", f"body: {exc}")
        self.requests += 1
        try:
            value = self.evaluate(path, request.get("input"))
        except EngineError as exc:
            return _error(500, "internal_error", str(exc))
        out: dict[str, Any] = {"decision_id": str(uuid.uuid4())}
        if value != "<undefined>":
            out["result"] = value
        if parse_qs(parts.query).get("provenance", [""])[0].lower() == "true":
            out["provenance"] = {"bundles": {BUNDLE_NAME: {"revision": self.revision}}}
        return 200, "application/json", json.dumps(out).encode("utf-8")

    def headers(self, method: str, target: str) -> dict[str, str]:
        """Headers to add to the answer of one request: none. (Tests that stand for a proxy
        in front of OPA add a ``Location``.)"""
        return {}


class _Server(ThreadingHTTPServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open: set[socket.socket] = set()
        """The connections being served (kept alive between requests): ``stop`` closes them,
        as a stopped OPA would."""
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self.open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self.open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._open_lock:
            connections = list(self.open)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by its client
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (the gateway's deadline passed) is not an error here."""


def _error(status: int, code: str, message: str) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps({"code": code, "message": message}).encode()


def _handler(standin: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as OPA does
        disable_nagle_algorithm = True  # headers and body leave at once (no 40 ms ACK wait)

        def do_GET(self) -> None:
            self._respond(b"")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._respond(self.rfile.read(length))

        def _respond(self, body: bytes) -> None:
            status, content_type, out = standin.answer(self.command, self.path, body)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(out)))
            for name, value in standin.headers(self.command, self.path).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
