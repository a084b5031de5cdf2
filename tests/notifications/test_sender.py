"""One delivery attempt (gateway/notifications/sender.py) against a receiver on 127.0.0.1 that
answers as a slow, redirecting or talkative one would: the bounds docs/configuration.md
gives ``notifications.*`` hold on the server's one HTTP client."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.adapters.shared.egress import EgressPolicy
from gateway.notifications.endpoints import Target
from gateway.notifications.sender import Attempt, Sender
from gateway.settings import NotificationSettings
from gateway.store.outbox import Delivery
from tests.helpers import loopback_certificates

pytestmark = pytest.mark.anyio
Answer = Callable[[socket.socket], None]


@contextlib.contextmanager
def receiver(answer: Answer, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """A receiver that reads one request and then does ``answer`` on its connection (over
    TLS with ``tls``, its server context)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def serve() -> None:
            conn, _ = listener.accept()
            if tls is not None:
                try:
                    conn = tls.wrap_socket(conn, server_side=True)
                except (ssl.SSLError, OSError):  # the client refused the certificate
                    conn.close()
                    return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                with contextlib.suppress(OSError):
                    answer(conn)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        scheme = "http" if tls is None else "https"
        yield f"{scheme}://127.0.0.1:{listener.getsockname()[1]}/hook"
        thread.join(10)


async def attempt(url: str, **config: object) -> Attempt:
    target = Target(url, b"k" * 32, EgressPolicy.build(["127.0.0.1"], ["127.0.0.1"]))
    settings = NotificationSettings.model_validate(config)
    sender = Sender(None, settings, {url: target})  # type: ignore[arg-type]  # no store needed
    delivery = Delivery("n1", url, "approval.requested", "ap1", "{}", 1, 0)
    try:
        return await sender.attempt(delivery)
    finally:
        await sender.aclose()


def dripping(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n")
    for _ in range(20):
        time.sleep(0.3)
        conn.sendall(b"x")


async def test_the_timeout_bounds_a_slowly_sent_answer_as_a_whole() -> None:
    with receiver(dripping) as url:
        assert await attempt(url, timeout="1s") == Attempt("retry", "no answer within 1s")


def redirecting(conn: socket.socket) -> None:
    conn.sendall(
        b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/\r\nContent-Length: 0\r\n\r\n"
    )


async def test_a_redirect_is_not_followed() -> None:
    with receiver(redirecting) as url:
        assert await attempt(url) == Attempt("dead", "answered 302, which is not retried")


def talkative(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 65536)
    conn.settimeout(5)
    conn.recv(1)  # the rest never comes: the client drops the connection instead


async def test_at_most_max_response_bytes_of_the_answer_are_read() -> None:
    with receiver(talkative) as url:
        assert await attempt(url, max_response_bytes="1KiB", timeout="3s") == Attempt(
            "delivered", "answered 200"
        )


def answering(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")


async def test_a_receiver_is_trusted_through_the_machine_s_trust_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where an operator adds an internal CA (``SSL_CERT_FILE`` names one here): the
    notifications trusted it before they moved to the one HTTP client, which checked every
    certificate against the certifi bundle, a tool's default, and refused the receiver."""
    ca, cert, key = loopback_certificates(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    with receiver(answering, tls) as url:
        assert await attempt(url, timeout="5s") == Attempt("delivered", "answered 204")


async def test_a_receiver_whose_certificate_is_not_trusted_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verification failure's errno, 1, was read as "operation not permitted"."""
    _, cert, key = loopback_certificates(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-bundle.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # no CA there either
    with receiver(answering, tls) as url:
        assert await attempt(url, timeout="5s") == Attempt(
            "retry",
            "could not connect: its certificate is not trusted "
            "(unable to get local issuer certificate)",
        )
