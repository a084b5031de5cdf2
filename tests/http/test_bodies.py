"""The body reader and header scan every door uses (gateway/http/bodies.py, heads.py): a
body is bounded on every read, at the REST door and at MCP's fast path alike."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Message

from gateway.errors import PayloadTooLarge
from gateway.http.bodies import read_body
from gateway.http.heads import Heads, Wanted
from gateway.mcp import stateless
from gateway.mcp.endpoint import build_server


def _chunks(*parts: bytes) -> Any:
    pending = [
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
        for i, part in enumerate(parts)
    ]

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    return receive


def test_a_body_is_read_whole_and_refused_past_its_bound() -> None:
    async def read(limit: int, *parts: bytes, declared: str | None = None) -> bytes:
        return await read_body(_chunks(*parts), limit, declared)

    assert anyio.run(read, 10, b"12345", b"678") == b"12345678"
    assert anyio.run(read, 10, b"1234567890") == b"1234567890"
    with pytest.raises(PayloadTooLarge):
        anyio.run(read, 10, b"123456", b"78901")  # chunked: refused at the read that passes
    with pytest.raises(PayloadTooLarge):
        anyio.run(lambda: read(10, b"", declared="11"))  # declared: before a byte is read


def test_the_heads_are_read_in_one_pass() -> None:
    wanted = Wanted(("content-type", "prefer"), every=("traceparent",))
    raw = [
        (b"content-type", b"application/json"),
        (b"traceparent", b"a"),
        (b"content-type", b"text/plain"),
        (b"traceparent", b"b"),
        (b"x-other", b"1"),
    ]
    heads = Heads.of(raw, wanted)
    assert heads.first == {"content-type": "application/json"}
    assert heads.every == {"traceparent": ["a", "b"]}
    assert heads.repeated == {"content-type"} and heads.certain
    assert not Heads.of([(b"Prefer", b"x")], wanted).certain


def test_the_mcp_fast_path_reads_a_body_within_its_bound() -> None:
    """Behind ``RequestBounds`` a body never passes ``max_body_bytes``; the fast path's own
    read holds to it too, as every read does."""
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    fast = stateless.StatelessCalls(build_server(), security, max_body_bytes=16)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}).encode()
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-method": "tools/call",
        "mcp-protocol-version": "2026-07-28",
    }
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": raw}

    async def send(message: Message) -> None:
        raise AssertionError(f"nothing is sent: {message}")

    async def call() -> None:
        request = Request(scope, _chunks(body[:10], body[10:]))
        await fast(request, Heads.of(raw, stateless.READ), send)

    with pytest.raises(PayloadTooLarge):
        anyio.run(call)
