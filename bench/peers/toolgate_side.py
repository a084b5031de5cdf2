"""Toolgate as one side of ``bench/peers/run.py``: a temporary project
(``gateway.testing.make_project``, SQLite) with one more declaration in tools.d, ``bench.echo``,
an HTTP tool that POSTs its arguments to the echo, called over REST (``POST /v1/executions``)
and MCP (``tools/call``, the stateless 2026-07-28 era)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gateway.testing import free_port, make_project, serve, stop, wait_healthy

NAME = "Toolgate"
TOOL = "bench.echo"
AUTH = {"Authorization": "Bearer tg_dev_alice"}
MCP_ERA = "2026-07-28"
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MCP_ERA,
    "Mcp-Method": "tools/call",
    "Mcp-Name": TOOL,
}

PER_CALL = (
    "API-key check, argument validation against the declaration, the policy decision, a "
    "durable execution and a hash-chained event log committed to SQLite before the answer, "
    "egress control on the upstream address, and the request on a pooled keep-alive aiohttp "
    "client."
)

DECLARATION = {
    "name": TOOL,
    "version": "1.0.0",
    "description": "POST the arguments to the bench's JSON echo and return its answer.",
    "adapter": "http",
    "operation": "request",
    "risk": "low",
    "side_effect": "read",
    "tags": ["http", "bench"],
    "input": {"message": {"type": "string", "required": True, "maxlength": 256}},
    "service": "echo",
    "method": "POST",
    "url": "/echo",
    "body": {"json": {"message": "{arguments.message}"}},
    "idempotency": "none",
    "timeout": "10s",
    "output_budget": "16KiB",
}


@contextlib.contextmanager
def started(root: Path, echo_base: str) -> Iterator[tuple[str, int]]:
    """``toolgate serve`` on a temporary project whose service ``echo`` is ``echo_base``:
    (base URL, pid)."""
    config = make_project(root, f"sqlite:///{root / 'var' / 'toolgate.db'}")
    data = yaml.safe_load(config.read_text())
    data["adapters"]["http"]["services"]["echo"] = {
        "base_url": echo_base,
        "allow_networks": ["127.0.0.1/32"],
    }
    config.write_text(yaml.safe_dump(data))
    (root / "tools.d" / f"{TOOL}.yaml").write_text(yaml.safe_dump(DECLARATION, sort_keys=False))
    port = free_port()
    with (root / f"gateway-{port}.log").open("wb") as log:
        proc = serve(config, port, log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        yield url, proc.pid
    finally:
        stop(proc)


def rest_body(call_id: str, message: str) -> dict[str, Any]:
    return {
        "run_id": "bench-peers",
        "call_id": call_id,
        "tool": {"name": TOOL},
        "arguments": {"message": message},
        "actor": {"user_id": "alice", "agent_id": "bench"},
        "workspace": {"id": "demo"},
    }


def mcp_body(call_id: str, message: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": TOOL,
            "arguments": {"message": message},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MCP_ERA,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.toolgate/run_id": "bench-peers",
                "io.toolgate/call_id": call_id,
                "io.toolgate/agent_id": "bench",
            },
        },
    }
