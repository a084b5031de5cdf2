"""``openapi-mcp-gateway`` (an OpenAPI spec mounted as an MCP server) as a peer of
``bench/peers/run.py``.

Installed by the bench on first use into ``.cache/peers/openapi-mcp-gateway-venv``. Started
with a spec of the echo (one operation, ``POST /echo``, operationId ``bench_echo``) on one
uvicorn process, streamable HTTP, log level warning (as the others), its defaults otherwise
(no client authentication, no shaping). Its MCP needs a session: the bench opens one per
client (``initialize``, then ``notifications/initialized``; two clients' concurrent calls in
one session hung) and sends that client's ``tools/call`` in it; the answers are SSE.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.peers import venvs
from gateway.testing import free_port, stop

PACKAGE = "openapi-mcp-gateway"
VERSION = "0.8.0"
VENV = venvs.CACHE / "openapi-mcp-gateway-venv"
NAME = f"openapi-mcp-gateway {VERSION}"
TOOL = "bench_echo"
MCP_VERSION = "2025-11-25"

PER_CALL = (
    "No client authentication (none configured by default), the MCP SDK's streamable-HTTP "
    "session lookup, the arguments mapped onto the OpenAPI operation, the request on a pooled "
    "httpx client, and the answer as text plus structuredContent in an SSE event. Nothing "
    "durable: no execution record, no audit log."
)

SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "bench echo", "version": "1.0.0"},
    "paths": {
        "/echo": {
            "post": {
                "operationId": TOOL,
                "summary": "POST the message to the bench's JSON echo.",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {"message": {"type": "string"}},
                                "required": ["message"],
                            }
                        }
                    },
                },
                "responses": {"200": {"description": "the echo"}},
            }
        }
    },
}


def installed() -> bool:
    return venvs.installed(VENV, PACKAGE, VERSION)


def install() -> None:
    venvs.install(VENV, PACKAGE, VERSION)


@contextlib.contextmanager
def started(data: Path, echo_base: str) -> Iterator[tuple[str, int, dict[str, str]]]:
    """The gateway on a free port in front of ``echo_base``: (its MCP URL, pid, the headers
    of an initialized session)."""
    data.mkdir(parents=True, exist_ok=True)
    spec = data / "echo-openapi.json"
    spec.write_text(json.dumps(SPEC))
    port = free_port()
    log_path = data / f"openapi-mcp-gateway-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                str(VENV / "bin" / "openapi-mcp-gateway"),
                "--spec",
                str(spec),
                "--base-url",
                echo_base,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=data,
        )
    url = f"http://127.0.0.1:{port}/api/mcp"
    try:
        headers = venvs.wait_up(proc, NAME, log_path, 60, lambda: session(url))
        yield url, proc.pid, headers
    finally:
        stop(proc)


def session(url: str) -> dict[str, str]:
    """``initialize`` and ``notifications/initialized``: the headers of the new session."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": MCP_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "toolgate-bench", "version": "1"},
        },
    }
    r = httpx.post(url, json=hello, headers=headers, timeout=10)
    sid = r.headers.get("mcp-session-id")
    if r.status_code != 200 or not sid:
        raise httpx.HTTPError(f"initialize answered {r.status_code}")
    headers = {**headers, "Mcp-Session-Id": sid, "MCP-Protocol-Version": MCP_VERSION}
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    httpx.post(url, json=done, headers=headers, timeout=10).raise_for_status()
    return headers


def call_body(_call_id: str, message: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": TOOL, "arguments": {"message": message}},
    }
