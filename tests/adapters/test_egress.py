"""Egress control: which addresses are refused, host allowlists, and the server's one HTTP
client (gateway/adapters/shared/client.py) against real sockets on loopback."""

from __future__ import annotations

import ipaddress
import json
import socket
import time

import pytest

from examples.orders_service import create_app, serving
from gateway.adapters.shared import client as http
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
from gateway.adapters.shared.urls import parse_url
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
    check_host(parse_url("https://api.example.com/x"), policy)
    for url in ("ftp://api.example.com/x", "file:///etc/passwd", "https://other.example.com/"):
        with pytest.raises(EgressRefused):
            check_host(parse_url(url), policy)


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


async def _get(networks: list[str], url: str) -> tuple[int | None, bytes]:
    client = http.Client(ssl_context=http.ssl_context(), limit=4)
    attempt = http.Attempt()
    allowed = EgressPolicy.build([], networks).networks
    try:
        async with client.open(attempt, allowed, "GET", parse_url(url), [], None) as answer:
            await http.read_body(answer, 1000, attempt.body)
    finally:
        await client.aclose()
    return attempt.status, bytes(attempt.body)


async def test_the_client_connects_only_to_allowed_addresses() -> None:
    with serving(create_app()) as base:
        port = parse_url(base).port
        status, body = await _get(["127.0.0.1"], f"http://127.0.0.1:{port}/healthz")
        assert (status, json.loads(body)) == (200, {"ok": True})
        with pytest.raises(EgressRefused, match="loopback"):
            await _get([], f"http://localhost:{port}/healthz")
        with pytest.raises(EgressRefused, match="loopback"):
            await _get([], f"http://127.0.0.1:{port}/healthz")


async def test_the_client_reports_a_closed_port_as_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(http.Unreachable) as info:
        await _get(["127.0.0.1"], f"http://127.0.0.1:{port}/")
    assert info.value.reason == "connection refused"


def test_a_url_with_a_host_no_server_has_is_not_a_url() -> None:
    """yarl takes "exa mple.com" as a host; the one parser refuses it, as httpx did."""
    for text in ("http://exa mple.com/", 'http://a"b.example/', "http://[::1"):
        with pytest.raises(ValueError):
            parse_url(text)
    assert parse_url("http://Bücher.example/a%2Fb").raw_host == "xn--bcher-kva.example"
    assert parse_url("http://Bücher.example/a%2Fb").raw_path == "/a%2Fb"
