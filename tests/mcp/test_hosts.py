"""DNS-rebinding protection takes its allowed hosts from configuration (a deployment behind a
proxy or in compose names itself)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.mcp.hosts import HostGuard, host_parts, origin_parts
from gateway.settings import load_settings
from gateway.testing import gateway, make_project
from tests.helpers import ALICE

BODY = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def _post(url: str, host: str) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {ALICE}",
        "Host": host,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/list",
    }
    body = {
        **BODY,
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    return httpx.post(url + "/mcp", json=body, headers=headers, timeout=30)


def test_the_environment_replaces_the_allowed_hosts(tmp_path: Path) -> None:
    (tmp_path / "toolgate.yaml").write_text("mcp: {workspace: demo}\n")
    env = {"TOOLGATE_MCP_ALLOWED_HOSTS": "toolgate:*, proxy:443"}
    settings = load_settings(tmp_path / "toolgate.yaml", env=env)
    assert settings.mcp.allowed_hosts == ("toolgate:*", "proxy:443")
    assert settings.mcp.workspace == "demo"


@pytest.mark.slow
def test_a_configured_host_is_served_and_the_loopback_default_is_gone(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path}/toolgate.db")
    with gateway(config, env={"TOOLGATE_MCP_ALLOWED_HOSTS": "toolgate:*"}) as url:
        served = _post(url, "toolgate:8080")
        assert served.status_code == 200, served.text
        assert "fs.write_file" in served.text
        assert _post(url, "127.0.0.1:8080").status_code == 421


HOSTILE_HOSTS = [
    "127.0.0.1:1@evil.example",
    "localhost:80/x@evil.example",
    "127.0.0.1:8080#@evil.example",
]
"""Each starts with an allowed ``name:``, which was all the SDK's check looked at."""
HOSTILE_ORIGINS = [
    "http://127.0.0.1:1@evil.example",
    "http://localhost:80/x@evil.example",
    "http://127.0.0.1:8080#@evil.example",
    "http://127.0.0.1:99999",
]
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
REQUESTS = {
    # a plain call of the 2026-07-28 era: answered by gateway/mcp/stateless.py
    "2026-07-28 tools/call": (
        {
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "fs.read_file",
        },
        {"name": "fs.read_file", "arguments": {"path": "nope.txt"}, "_meta": ENVELOPE},
        "tools/call",
    ),
    # the same era through the SDK's transport
    "2026-07-28 tools/list": (
        {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
        {"_meta": ENVELOPE},
        "tools/list",
    ),
    # the 2025-11-25 handshake (the SDK's session manager)
    "2025-11-25 initialize": (
        {},
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
        "initialize",
    ),
}


def _send(url: str, what: str, **headers: str) -> httpx.Response:
    extra, params, method = REQUESTS[what]
    sent = {
        "Authorization": f"Bearer {ALICE}",
        "Accept": "application/json, text/event-stream",
        **extra,
        **headers,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return httpx.post(url + "/mcp", json=body, headers=sent, timeout=30)


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("hosts")
    with gateway(make_project(root, f"sqlite:///{root}/toolgate.db")) as url:
        yield url


@pytest.mark.slow
@pytest.mark.parametrize("what", REQUESTS)
def test_a_host_is_checked_whole_on_both_paths(loopback: str, what: str) -> None:
    port = loopback.rsplit(":", 1)[1]
    served = _send(loopback, what, Host=f"127.0.0.1:{port}")
    assert served.status_code == 200, served.text
    for host in HOSTILE_HOSTS:
        refused = _send(loopback, what, Host=host)
        assert (refused.status_code, refused.text) == (421, "Invalid Host header"), host


@pytest.mark.slow
@pytest.mark.parametrize("what", REQUESTS)
def test_an_origin_is_checked_whole_on_both_paths(loopback: str, what: str) -> None:
    port = loopback.rsplit(":", 1)[1]
    served = _send(loopback, what, Origin=f"http://localhost:{port}")
    assert served.status_code == 200, served.text
    for origin in HOSTILE_ORIGINS:
        refused = _send(loopback, what, Origin=origin)
        assert (refused.status_code, refused.text) == (403, "Invalid Origin header"), origin


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        ("toolgate", ("toolgate", False)),
        ("toolgate:8080", ("toolgate", True)),
        ("[::1]:65535", ("[::1]", True)),
        ("10.0.0.1:1", ("10.0.0.1", True)),
        ("toolgate:0", None),
        ("toolgate:65536", None),
        ("toolgate:", None),
        ("toolgate:80:80", None),
        ("[nope]:80", None),
        ("tool gate", None),
        ("toolgate\n", None),
        ("a@b", None),
        ("", None),
    ],
)
def test_a_host_value_is_host_and_port_and_nothing_else(
    value: str, parts: tuple[str, bool] | None
) -> None:
    assert host_parts(value) == parts
    scheme = None if parts is None else (f"https://{parts[0]}", parts[1])
    assert origin_parts(f"https://{value}") == scheme


def test_a_listed_value_is_exact_or_under_its_port_pattern() -> None:
    guard = HostGuard(["toolgate:8080", "proxy", "127.0.0.1:*"], ["https://app.example:*"])

    def status(host: str, origin: str | None = None) -> int | None:
        headers = [(b"host", host.encode())]
        if origin is not None:
            headers.append((b"origin", origin.encode()))
        refused = guard.refusal({"type": "http", "headers": headers})
        return None if refused is None else refused.status_code

    assert status("toolgate:8080") is None
    assert status("proxy") is None
    assert status("127.0.0.1:9") is None
    assert [status(h) for h in ("toolgate:8081", "toolgate", "proxy:80", "127.0.0.1")] == [421] * 4
    assert status("proxy", "https://app.example:443") is None
    assert status("proxy", "https://app.example") == 403  # a pattern with :* wants a port
    assert status("proxy", "https://app.example:443/") == 403
