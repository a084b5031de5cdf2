"""``toolgate mcp --url URL``: a stdio MCP server that relays every message to a gateway's
``/mcp`` over streamable HTTP, for desktop clients that only launch local servers.

The bridge holds no state of its own beyond what each era needs on the HTTP side: the
2025-11-25 session (the SDK transport keeps its id) and the protocol-version and routing
headers each message must carry (2026-07-28 names its version in ``_meta``; 2025-11-25 in
the ``initialize`` answer). The API key comes from an environment variable, never the
command line (where ``ps`` would show it).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
)
from mcp.shared.message import ClientMessageMetadata, SessionMessage
from mcp_types import PROTOCOL_VERSION_META_KEY, JSONRPCRequest, JSONRPCResponse

log = logging.getLogger("toolgate.mcp.bridge")
KEY_VARIABLE = "TOOLGATE_API_KEY"


class _Versions:
    """The protocol version the HTTP side must name: from a message's own ``_meta``
    (2026-07-28), else the one ``initialize`` negotiated (2025-11-25)."""

    def __init__(self) -> None:
        self.negotiated: str | None = None
        self.initialize_ids: set[Any] = set()

    def headers(self, message: Any) -> dict[str, str]:
        params = getattr(message, "params", None) or {}
        method = getattr(message, "method", None)
        if method == "initialize" and isinstance(message, JSONRPCRequest):
            self.initialize_ids.add(message.id)
            return {}
        modern = (params.get("_meta") or {}).get(PROTOCOL_VERSION_META_KEY)
        if isinstance(modern, str):
            headers = {MCP_PROTOCOL_VERSION_HEADER: modern}
            if isinstance(method, str):
                headers[MCP_METHOD_HEADER] = method
                name = params.get(NAME_BEARING_METHODS.get(method, ""))
                if isinstance(name, str):
                    headers[MCP_NAME_HEADER] = encode_header_value(name)
            return headers
        return {MCP_PROTOCOL_VERSION_HEADER: self.negotiated} if self.negotiated else {}

    def observe(self, message: Any) -> None:
        if isinstance(message, JSONRPCResponse) and message.id in self.initialize_ids:
            version = (message.result or {}).get("protocolVersion")
            if isinstance(version, str):
                self.negotiated = version


async def relay(url: str, key: str) -> None:
    """Relay stdin ⇄ ``url`` until stdin closes."""
    versions = _Versions()
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(60, read=300)
    )
    async with (
        http,
        stdio_server() as (local_in, local_out),
        streamable_http_client(url, http_client=http) as (remote_in, remote_out),
        anyio.create_task_group() as group,
    ):

        async def down() -> None:
            async for item in remote_in:
                if isinstance(item, Exception):
                    print(f"toolgate mcp: {item}", file=sys.stderr)
                    continue
                versions.observe(item.message)
                await local_out.send(item)

        group.start_soon(down)
        async for item in local_in:
            if isinstance(item, Exception):
                print(f"toolgate mcp: unreadable message: {item}", file=sys.stderr)
                continue
            metadata = ClientMessageMetadata(headers=versions.headers(item.message))
            await remote_out.send(SessionMessage(item.message, metadata=metadata))
        group.cancel_scope.cancel()
