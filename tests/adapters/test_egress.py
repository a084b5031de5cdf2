"""Egress control: which addresses are refused, host allowlists, and the guarded transport
against real sockets on loopback."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any

import anyio
import httpcore
import httpx
import pytest

from examples.orders_service import create_app, serving
from gateway.adapters.shared.egress import (
    EgressPolicy,
    EgressRefused,
    check_host,
    check_url,
    normalise_host,
    parse_network,
    refusal,
    resolve,
)
from gateway.adapters.shared.transport import GuardedBackend, guarded_transport
from gateway.errors import ExecutionError

pytestmark = pytest.mark.anyio
NOTHING = EgressPolicy()


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.10.10", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "non-public"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("64:ff9b::a01:203", "private"),
        ("2002:7f00:1::", "loopback"),
    ],
)
def test_non_public_addresses_are_refused_by_default(address: str, kind: str) -> None:
    assert refusal(ipaddress.ip_address(address), NOTHING) == kind


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address), NOTHING) is None


def test_allowed_networks_open_only_what_they_name() -> None:
    policy = EgressPolicy.build([], ["127.0.0.1", "10.0.0.0/8"])
    assert refusal(ipaddress.ip_address("127.0.0.1"), policy) is None
    assert refusal(ipaddress.ip_address("::ffff:127.0.0.1"), policy) is None
    assert refusal(ipaddress.ip_address("10.200.0.1"), policy) is None
    assert refusal(ipaddress.ip_address("127.0.0.2"), policy) == "loopback"
    assert refusal(ipaddress.ip_address("192.168.0.1"), policy) == "private"


def test_metadata_needs_its_exact_address_even_inside_an_allowed_range() -> None:
    metadata = ipaddress.ip_address("169.254.169.254")
    broad = EgressPolicy.build([], ["169.254.0.0/16"])
    assert refusal(ipaddress.ip_address("169.254.1.1"), broad) is None
    assert refusal(metadata, broad) == "cloud metadata"
    assert refusal(metadata, EgressPolicy.build([], ["169.254.169.254/32"])) is None


def test_parse_network_rejects_host_bits_and_garbage() -> None:
    assert parse_network("127.0.0.1") == ipaddress.ip_network("127.0.0.1/32")
    with pytest.raises(ValueError, match="host bits set"):
        parse_network("10.1.2.3/8")
    with pytest.raises(ValueError):
        parse_network("localhost")


def test_host_allowlist_exact_wildcard_and_any() -> None:
    policy = EgressPolicy.build(["API.Example.com.", "*.svc.example.net", "127.0.0.1"], [])
    assert policy.permits_host("api.example.com")
    assert policy.permits_host("a.b.svc.example.net")
    assert not policy.permits_host("svc.example.net")  # *. is subdomains only
    assert not policy.permits_host("evil-api.example.com")
    assert not policy.permits_host("api.example.com.evil.org")
    assert policy.permits_host("127.0.0.1")
    assert EgressPolicy.build(["*"], []).permits_host("anything.example")
    assert normalise_host("bücher.example") == "xn--bcher-kva.example"
    assert normalise_host("[::1]") == "::1"


def test_check_host_refuses_other_schemes_and_hosts() -> None:
    policy = EgressPolicy.build(["api.example.com"], [])
    check_host(httpx.URL("https://api.example.com/x"), policy)
    for url in ("ftp://api.example.com/x", "file:///etc/passwd", "https://other.example.com/"):
        with pytest.raises(EgressRefused):
            check_host(httpx.URL(url), policy)


async def test_resolve_checks_every_address_of_a_name() -> None:
    started = time.monotonic()
    with pytest.raises(EgressRefused, match="loopback"):
        await resolve("localhost", 80, NOTHING)
    for literal, kind in (("169.254.169.254", "cloud metadata"), ("10.1.2.3", "private")):
        with pytest.raises(EgressRefused, match=kind) as info:
            await resolve(literal, 80, EgressPolicy.build([], ["169.254.0.0/16"]))
        assert info.value.code == "egress_refused" and info.value.retryable is False
    assert time.monotonic() - started < 2  # refused before any connection attempt


async def test_unresolvable_host_is_a_clear_error() -> None:
    with pytest.raises(ExecutionError) as info:
        await resolve("no-such-host.invalid", 80, NOTHING)
    assert info.value.code == "dns_failed"
    assert "no-such-host.invalid" in info.value.message


async def test_check_url_returns_the_checked_addresses() -> None:
    policy = EgressPolicy.build(["127.0.0.1"], ["127.0.0.0/8"])
    dest = await check_url("http://127.0.0.1:8123/a?b=c", policy)
    assert (dest.host, dest.port) == ("127.0.0.1", 8123)
    assert dest.addresses == (ipaddress.ip_address("127.0.0.1"),)
    with pytest.raises(EgressRefused, match="not a valid URL"):
        await check_url("http://[::1", policy)


def _transport(networks: list[str]) -> httpx.AsyncHTTPTransport:
    return guarded_transport(
        EgressPolicy.build([], networks),
        ssl_context=httpx.create_ssl_context(),
        limits=httpx.Limits(max_connections=4),
    )


async def test_guarded_transport_connects_only_to_allowed_addresses() -> None:
    with serving(create_app()) as base:
        port = httpx.URL(base).port
        async with httpx.AsyncClient(transport=_transport(["127.0.0.1"])) as client:
            response = await client.get(f"http://127.0.0.1:{port}/healthz")
            assert response.json() == {"ok": True}
        async with httpx.AsyncClient(transport=_transport([])) as client:
            with pytest.raises(EgressRefused, match="loopback"):
                await client.get(f"http://127.0.0.1:{port}/healthz")


async def test_guarded_transport_refuses_unix_sockets() -> None:
    backend = GuardedBackend(EgressPolicy())
    with pytest.raises(EgressRefused):
        await backend.connect_unix_socket("/var/run/docker.sock")


async def test_guarded_transport_maps_a_closed_port_to_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with httpx.AsyncClient(transport=_transport(["127.0.0.1"])) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")


async def test_connect_timeout_covers_resolution_and_connect() -> None:
    class Slow(httpcore.AsyncNetworkBackend):
        async def connect_tcp(self, *args: object, **kwargs: object) -> httpcore.AsyncNetworkStream:
            await anyio.sleep(5)
            raise AssertionError("not reached")

    backend = GuardedBackend(EgressPolicy.build([], ["127.0.0.1"]), inner=Slow())
    with pytest.raises(httpcore.ConnectTimeout):
        await backend.connect_tcp("127.0.0.1", 9, timeout=0.1)


class _AskedBackend(httpcore.AnyIOBackend):
    """The real backend, noting every attribute its streams are asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        stream = await super().connect_tcp(*args, **kwargs)
        inner = stream.get_extra_info

        def get_extra_info(info: str) -> Any:
            self.asked.append(info)
            return inner(info)

        stream.get_extra_info = get_extra_info  # type: ignore[method-assign]
        return stream


async def test_the_pool_checks_idle_connections_on_the_socket_itself() -> None:
    """Issue 33: the pool asks each idle connection whether it is readable (closed by the
    server) on every request and response; anyio's stream rebuilt its whole table of
    attributes, a getpeername included, for each question. The guarded stream answers it
    from its socket."""
    inner = _AskedBackend()
    backend = GuardedBackend(EgressPolicy.build([], ["127.0.0.1"]), inner=inner)
    with serving(create_app()) as base:
        async with httpcore.AsyncConnectionPool(network_backend=backend) as pool:
            for _ in range(3):
                assert (await pool.request("GET", f"{base}/healthz")).status == 200
            assert len(pool.connections) == 1
    assert "is_readable" not in inner.asked


async def test_a_kept_connection_the_server_closed_is_not_reused() -> None:
    """The socket's own readability shows a connection the server closed after answering:
    the next request opens a new one instead of failing on the old."""
    closed = threading.Event()
    served: list[int] = []
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"

    def serve(listener: socket.socket) -> None:
        for n in range(2):
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                conn.sendall(answer)
                served.append(n)
            if n == 0:
                closed.set()  # the first connection is closed, kept alive for the client

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        thread = threading.Thread(target=serve, args=(listener,), daemon=True)
        thread.start()
        async with httpx.AsyncClient(transport=_transport(["127.0.0.1"])) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/")).text == "ok"
            assert closed.wait(10)
            assert (await client.get(f"http://127.0.0.1:{port}/")).text == "ok"
        thread.join(10)
    assert served == [0, 1]
