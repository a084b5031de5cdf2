"""The HTTP adapter's client (gateway/adapters/shared/client.py, the server's one) and
kept-alive connections, against a server on 127.0.0.1 that speaks just enough HTTP/1.1 to
close a connection where a real one would: idle after its keep-alive, or just as a request
arrives on it."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.adapters.http import adapter as http
from gateway.adapters.http.options import HttpConfig
from gateway.adapters.shared.client import IDLE_SECONDS
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ExecutionError
from gateway.testing import adapter_call, load_declaration
from gateway.types import Outcome
from tests.adapters.helpers import HTTP_HEAD
from tests.helpers import until

pytestmark = pytest.mark.anyio
SERVER_KEEP_ALIVE = 5.0
"""uvicorn's, Node.js's and Apache's default keep-alive, in seconds."""
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


@dataclass
class Connection:
    requests: list[str] = field(default_factory=list)
    """The request line of each request it received."""
    closed_by: str = ""
    """"client" when the client closed it while the server kept it alive, else "server"."""


def _read_request(conn: socket.socket, pending: bytes) -> tuple[str, bytes] | None:
    """(request line, what follows it) of the next request, None when the client closed."""
    while b"\r\n\r\n" not in pending:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        pending += chunk
    head, _, rest = pending.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        rest += conn.recv(65536)
    return head.split(b"\r\n")[0].decode(), rest[length:]


@contextlib.contextmanager
def keepalive_server(script: list[list[str]]) -> Iterator[tuple[int, list[Connection]]]:
    """Connection i does ``script[i]`` with its requests in turn: ``answer`` (200, kept
    alive) or ``close`` (read it whole, close without answering: a server closing an idle
    connection just as a request came). After its script a connection is kept alive for
    SERVER_KEEP_ALIVE seconds. Yields (port, the connections accepted so far)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)
    seen: list[Connection] = []
    stop = threading.Event()

    def serve(conn: socket.socket, steps: list[str], record: Connection) -> None:
        pending = b""
        with conn:
            for step in steps:
                got = _read_request(conn, pending)
                if got is None:
                    record.closed_by = "client"
                    return
                line, pending = got
                record.requests.append(line)
                if step == "close":
                    record.closed_by = "server"
                    return
                conn.sendall(OK)
            conn.settimeout(SERVER_KEEP_ALIVE)
            try:
                record.closed_by = "server" if conn.recv(65536) else "client"
            except TimeoutError:
                record.closed_by = "server"

    def accept() -> None:
        while not stop.is_set() and len(seen) < len(script):
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            seen.append(Connection())
            steps = script[len(seen) - 1]
            threading.Thread(target=serve, args=(conn, steps, seen[-1]), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@pytest.fixture
async def adapter() -> AsyncIterator[http.HttpAdapter]:
    opened = http.HttpAdapter(HttpConfig.model_validate({}))
    yield opened
    await opened.aclose()


def _tool(tmp_path: Path, port: int, method: str, extra: str = "") -> ToolDeclaration:
    path = tmp_path / "t.yaml"
    path.write_text(
        HTTP_HEAD
        + f"""\
side_effect: {"read" if method == "GET" else "external"}
method: {method}
url: http://127.0.0.1:{port}/items
egress: {{allow_networks: [127.0.0.1/32]}}
{extra}"""
    )
    return load_declaration(path)[0]


async def test_an_idle_connection_is_closed_before_the_usual_server_keep_alive(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    """The adapter kept idle connections 5 s, as long as uvicorn keeps them: the server could
    close one just as a request was sent on it, and the response was lost (seen once in the
    bench). The client now closes an idle connection before such a server does."""
    with keepalive_server([["answer"]]) as (port, seen):
        out = await adapter.execute(adapter_call(_tool(tmp_path, port, "GET")))
        assert out.data["status"] == 200
        await until(lambda: seen and seen[0].closed_by, "the idle connection closed", limit=15)
    assert seen[0].closed_by == "client"
    assert IDLE_SECONDS < SERVER_KEEP_ALIVE


async def test_a_get_on_a_kept_connection_the_server_closed_is_sent_again_once(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    """A reused connection that the server closes as the request arrives, before any answer:
    a GET (safe to repeat) is sent again, once, on a new connection."""
    with keepalive_server([["answer", "close"], ["answer"]]) as (port, seen):
        tool = _tool(tmp_path, port, "GET")
        first = await adapter.execute(adapter_call(tool))
        second = await adapter.execute(adapter_call(tool))
    assert (first.outcome, second.outcome) == (Outcome.SUCCEEDED, Outcome.SUCCEEDED)
    assert [c.requests for c in seen] == [["GET /items HTTP/1.1"] * 2, ["GET /items HTTP/1.1"]]


async def test_a_post_on_a_kept_connection_the_server_closed_is_never_sent_again(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    """The same race for a POST without a provider key: the server may have processed it,
    so it is not sent again; the outcome is uncertain (reconciled by the pipeline)."""
    with keepalive_server([["answer", "close"], ["answer"]]) as (port, seen):
        tool = _tool(tmp_path, port, "POST", "body: {json: {a: 1}}\n")
        await adapter.execute(adapter_call(tool))
        with pytest.raises(ExecutionError) as info:
            await adapter.execute(adapter_call(tool))
        assert [c.requests for c in seen] == [["POST /items HTTP/1.1"] * 2]
    assert info.value.code == "interrupted" and info.value.retryable is False
    assert info.value.details["reason"] == "response_lost"


async def test_a_keyed_post_on_a_kept_connection_the_server_closed_is_sent_again_once(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    """With the provider's idempotency key a repeat cannot duplicate the effect: sent again."""
    extra = "body: {json: {a: 1}}\nidempotency_header: Idempotency-Key\n"
    with keepalive_server([["answer", "close"], ["answer"]]) as (port, seen):
        tool = _tool(tmp_path, port, "POST", extra)
        await adapter.execute(adapter_call(tool, key="k-1"))
        out = await adapter.execute(adapter_call(tool, key="k-2"))
    assert out.outcome is Outcome.SUCCEEDED
    assert [len(c.requests) for c in seen] == [2, 1]


async def test_a_get_whose_new_connection_drops_is_not_sent_again(
    adapter: http.HttpAdapter, tmp_path: Path
) -> None:
    """On a new connection nothing says the server did not process the request: even a GET
    is not sent again (aiohttp would, for any idempotent method; its retry is off)."""
    with keepalive_server([["close"], ["answer"]]) as (port, seen):
        with pytest.raises(ExecutionError) as info:
            await adapter.execute(adapter_call(_tool(tmp_path, port, "GET")))
        assert [c.requests for c in seen] == [["GET /items HTTP/1.1"]]
    assert info.value.code == "interrupted" and info.value.retryable is True
