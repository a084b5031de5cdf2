"""Slow clients against a real ``toolgate serve``: a connection that sends its request a byte
now and then, or nothing at all, is let go after ``request_read_timeout``. Without it each one
was held for ever, and enough of them took the process's file descriptors from everyone."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import yaml

from gateway.testing import gateway, make_project
from tests.helpers import starts_processes

READ_TIMEOUT = 1.0
"""The served gateway's ``request_read_timeout``, in seconds."""
WAIT = 20.0
"""How long the test waits for the server to end a connection: far past READ_TIMEOUT."""


@pytest.fixture(scope="module")
@starts_processes
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("slow")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    data = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**data, "request_read_timeout": f"{READ_TIMEOUT}s"}))
    with gateway(config) as url:
        yield url


SENT = {
    "nothing": b"",
    "half a head": b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nAuthor",
    "half a body": b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tg_dev_alice"
    b'\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{"run_id":',
    "chunks that never end": b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer"
    b" tg_dev_alice\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'3\r\n{"r\r\n',
}
"""What each slow client sends before it falls silent."""
ANSWERED = {
    "nothing": b"HTTP/1.1 408 ",
    "half a head": b"HTTP/1.1 408 ",
    "half a body": b"",
    "chunks that never end": b"",
}
"""How each answer begins: 408 while no head is whole, else the connection closed unanswered
(the gateway, reading the body, saw the client gone)."""


def _until_closed(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("what", SENT)
def test_a_request_that_does_not_arrive_in_time_is_let_go(served: str, what: str) -> None:
    host, port = served.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT) as conn:
        conn.sendall(SENT[what])
        answer = _until_closed(conn)  # a server that holds the connection: socket.timeout
    assert answer[: len(ANSWERED[what])] == ANSWERED[what] and (answer == b"") == (
        ANSWERED[what] == b""
    ), answer
