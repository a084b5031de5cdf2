"""Browser egress: a page cannot reach a refused address by any path Chromium offers.

Real Chromium, real servers on loopback: the page is served from 127.0.0.2 (allowed), the
"internal service" listens on 127.0.0.3 (refused) and records every TCP connection it
accepts. A page that redirects there, ``fetch()``es it, opens a WebSocket to it, has a
service worker fetch it, or loads an ``<img>`` from a name that resolves to it (the
resolver is injected: there is no DNS here) must leave it with nothing; the same page with
127.0.0.3 allowed reaches it on every path, so the test would see a leak. The proxy's own
edges (DNS rebinding, bad requests, the tunnel bound) are tested on a bare socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gateway.adapters.browser.adapter import BrowserAdapter
from gateway.adapters.browser.proxy import MARKER, EgressProxy
from gateway.adapters.browser.sessions import BrowserConfig
from gateway.adapters.shared.artifacts import ArtifactStore
from gateway.adapters.shared.egress import EgressPolicy, IPAddress
from gateway.types import Outcome
from gateway.workspace import Workspace
from tests.adapters.test_browser import declare, make_call, require_chromium
from tests.helpers import starts_processes

pytestmark = pytest.mark.anyio
ALLOWED, REFUSED = "127.0.0.2", "127.0.0.3"
INTERNAL = "internal.test"  # resolves to REFUSED, through the injected resolver only


class Recorder:
    """A TCP server on REFUSED that records each connection's request line."""

    def __init__(self) -> None:
        self.sock = socket.create_server((REFUSED, 0))
        self.port = self.sock.getsockname()[1]
        self.connections: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    first = conn.recv(4096).split(b"\r\n", 1)[0].decode("latin-1")
                except OSError:
                    first = "?"
                self.connections.append(first)
                body = b"ok"
                head = (
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                    "Access-Control-Allow-Origin: *\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                with contextlib.suppress(OSError):
                    conn.sendall(head.encode() + body)

    def drain(self) -> None:
        """Returns once every connection accepted before this one of its own is recorded
        (one thread takes them in order), its own left out of ``connections``."""
        mark = "GET /drained HTTP/1.1"
        with socket.create_connection((REFUSED, self.port), timeout=10) as conn:
            conn.sendall(f"{mark}\r\n\r\n".encode())
            while conn.recv(4096):  # answered and closed: recorded
                pass
        self.connections.remove(mark)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept(); close() alone does not
        self.sock.close()
        self._thread.join(5)


def _attack(refused_port: int) -> str:
    target = f"http://{REFUSED}:{refused_port}"
    return f"""<!doctype html><title>attack</title><p id=out>running</p><script>
const results = {{}};
const settle = (p, ms) => Promise.race([p, new Promise(r => setTimeout(() => r("timeout"), ms))]);
async function run() {{
  results.fetch = await fetch("{target}/fetch").then(r => r.text()).then(t => t, () => "failed");
  results.ws = await settle(new Promise(res => {{
    const s = new WebSocket("ws://{REFUSED}:{refused_port}/ws");
    s.onopen = () => res("open"); s.onerror = () => res("error"); }}), 3000);
  results.img = await settle(new Promise(res => {{
    const i = new Image(); i.onload = () => res("loaded"); i.onerror = () => res("error");
    i.src = "http://{INTERNAL}:{refused_port}/img"; }}), 3000);
  try {{
    await navigator.serviceWorker.register("/sw.js");
    const claimed = new Promise(r => navigator.serviceWorker.controller ? r()
      : navigator.serviceWorker.addEventListener("controllerchange", r, {{once: true}}));
    await settle(claimed, 3000);
    results.sw = await fetch("/via-worker").then(r => r.text(), () => "no worker");
  }} catch (e) {{ results.sw = "error " + e; }}
  const out = document.getElementById("out");
  out.textContent = JSON.stringify(results); out.className = "done";
}}
run();
</script>"""


def _worker(refused_port: int) -> str:
    return f"""self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", e => e.waitUntil(self.clients.claim()));
self.addEventListener("fetch", e => {{
  if (!e.request.url.endsWith("/via-worker")) return;
  e.respondWith(fetch("http://{REFUSED}:{refused_port}/sw").then(r => r.text())
    .then(t => new Response(t), err => new Response("failed " + err)));
}});"""


class _Handler(BaseHTTPRequestHandler):
    server: _Pages

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", parse_qs(parts.query)["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        kind, body = {
            "/attack": ("text/html", _attack(self.server.refused_port)),
            "/sw.js": ("application/javascript", _worker(self.server.refused_port)),
        }.get(parts.path, ("text/html", "<title>page</title><p id=p>page</p>"))
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Pages(ThreadingHTTPServer):
    daemon_threads = True
    refused_port: int


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[_Pages, Recorder]]:
    recorder = Recorder()
    pages = _Pages((ALLOWED, 0), _Handler)
    pages.refused_port = recorder.port
    thread = threading.Thread(target=pages.serve_forever, daemon=True)
    thread.start()
    try:
        yield pages, recorder
    finally:
        pages.shutdown()
        pages.server_close()
        recorder.close()
        thread.join(5)


async def fake_lookup(name: str, port: int) -> tuple[IPAddress, ...]:
    if name == INTERNAL:
        return (ipaddress.ip_address(REFUSED),)
    raise AssertionError(f"unexpected lookup of {name}")


@pytest.fixture(scope="module")
@starts_processes
async def adapter(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BrowserAdapter]:
    require_chromium()
    var = tmp_path_factory.mktemp("egress")
    browser = BrowserAdapter(BrowserConfig(), ArtifactStore(var / "artifacts"))
    browser.pool.lookup = fake_lookup
    try:
        yield browser
    finally:
        await browser.aclose()


def _tool(tmp_path: Path, networks: list[str], steps: str, name: str) -> Any:
    return declare(
        tmp_path,
        f'operation: steps\nside_effect: read\nsession: "{{arguments.session}}"\nsteps:\n{steps}'
        f"egress: {{allow_networks: {json.dumps(networks)}}}\n",
        name=name,
    )


@pytest.mark.parametrize("refused", [True, False], ids=["refused", "allowed-control"])
async def test_a_page_never_reaches_a_refused_address(
    adapter: BrowserAdapter,
    servers: tuple[_Pages, Recorder],
    tmp_path: Path,
    refused: bool,
) -> None:
    pages, recorder = servers
    recorder.connections.clear()
    networks = [ALLOWED] if refused else [ALLOWED, REFUSED]
    tool = _tool(
        tmp_path,
        networks,
        '  - {open: "{arguments.url}"}\n'
        "  - {wait_for: '#out.done', timeout: 12s}\n"
        "  - {extract: '#out', name: out}\n",
        "t.attack",
    )
    opener = _tool(tmp_path, networks, '  - {open: "{arguments.url}"}\n', "t.open")
    ws = Workspace("demo", tmp_path.resolve())
    session = "refused" if refused else "control"
    base = f"http://{ALLOWED}:{pages.server_address[1]}"

    out = await adapter.execute(make_call(tool, ws, 30, url=f"{base}/attack", session=session))
    assert out.outcome is Outcome.SUCCEEDED, out.error
    results = json.loads(out.data["extracted"]["out"])

    target = f"http://{REFUSED}:{recorder.port}/redirected"
    hop = await adapter.execute(
        make_call(opener, ws, url=f"{base}/redirect?to={target}", session=session)
    )
    await asyncio.to_thread(recorder.drain)  # a leaked connection is recorded by now
    seen = sorted({line.split(" ")[1] for line in recorder.connections if " " in line})
    if refused:
        assert recorder.connections == [], recorder.connections
        assert results["fetch"] == "failed" and results["ws"] == "error", results
        assert results["img"] == "error" and results["sw"].startswith("failed"), results
        assert hop.outcome is Outcome.FAILED
        assert hop.error is not None and hop.error.code == "egress_refused"
        assert REFUSED in hop.error.message
        reasons = " ".join(out.data["refused_requests"])
        assert REFUSED in reasons and f"{INTERNAL} ({REFUSED})" in reasons
        evidence = {e.ref: e.data["reason"] for e in out.evidence if e.kind == "egress_refused"}
        assert f"http://{INTERNAL}:{recorder.port}/img" in evidence, evidence
    else:  # the same paths do leave when the address is allowed: the check above can fail
        assert {"/fetch", "/img", "/redirected", "/sw", "/ws"} <= set(seen), seen
        assert results["fetch"] == results["sw"] == "ok", results
        assert hop.outcome is Outcome.SUCCEEDED and hop.data["url"] == target, hop.error


# --- the proxy on a bare socket ------------------------------------------------------------


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def test_the_proxy_connects_only_to_the_address_it_checked(
    servers: tuple[_Pages, Recorder],
) -> None:
    """DNS rebinding: the name is resolved once; a second answer could not be used."""
    pages, recorder = servers
    answers = [ipaddress.ip_address(ALLOWED), ipaddress.ip_address(REFUSED)]
    asked: list[str] = []

    async def rebinding(name: str, port: int) -> tuple[IPAddress, ...]:
        asked.append(name)
        return (answers.pop(0),)

    refusals: list[str] = []
    policy = EgressPolicy.build(["*"], [ALLOWED])
    proxy = EgressProxy(lambda: policy, lambda t, why: refusals.append(why), lookup=rebinding)
    await proxy.start()
    recorder.connections.clear()
    try:
        port = pages.server_address[1]
        got = await _exchange(
            proxy.port,
            f"GET http://rebind.test:{port}/x HTTP/1.1\r\nHost: rebind.test\r\n\r\n".encode(),
        )
        assert got.startswith(b"HTTP/1.0 200") and b"id=p" in got
        assert asked == ["rebind.test"] and refusals == []

        got = await _exchange(
            proxy.port, f"CONNECT rebind.test:{recorder.port} HTTP/1.1\r\n\r\n".encode()
        )
        assert got.startswith(b"HTTP/1.1 403") and f"{MARKER}: refused".encode() in got
        assert "rebind.test (127.0.0.3)" in refusals[0]
        assert b"127.0.0.3" not in got  # the reason is evidence, not for the page

        for target in (f"[::ffff:{REFUSED}]:{recorder.port}", f"127.0.0.1:{recorder.port}"):
            got = await _exchange(proxy.port, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            assert got.startswith(b"HTTP/1.1 403"), target
        assert recorder.connections == []

        for bad in (
            b"NONSENSE\r\n\r\n",
            b"GET /relative HTTP/1.1\r\n\r\n",
            b"CONNECT x HTTP/1.1\r\n\r\n",
            b"CONNECT a.test/x:25 HTTP/1.1\r\n\r\n",
        ):
            assert (await _exchange(proxy.port, bad)).startswith(b"HTTP/1.1 400")
    finally:
        await proxy.aclose()


async def test_the_proxy_bounds_its_tunnels(servers: tuple[_Pages, Recorder]) -> None:
    pages, _ = servers
    policy = EgressPolicy.build(["*"], [ALLOWED])
    proxy = EgressProxy(lambda: policy, lambda target, why: None, max_tunnels=1)
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT {ALLOWED}:{pages.server_address[1]} HTTP/1.1\r\n\r\n".encode())
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        busy = await _exchange(proxy.port, b"CONNECT 127.0.0.2:1 HTTP/1.1\r\n\r\n")
        assert busy.startswith(b"HTTP/1.1 503")
        writer.close()
        await writer.wait_closed()
    finally:
        await proxy.aclose()
