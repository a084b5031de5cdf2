"""What a handler of ``/mcp`` needs of the HTTP request that carried its message.

``McpEndpoint`` records the authenticated caller in the request's scope (the ``*_SCOPE_KEY``
entries); ``Door`` is that caller with the runtime, the base URL of the links an answer
carries and the headers a call reads (its protocol version, session and trace context),
made once per request, by the SDK's handlers from their context (``Door.of``) and by the
fast path from the headers it read already (``Door.of_request``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request

from gateway.http.heads import Heads, Wanted
from gateway.runtime.container import Runtime

PRINCIPAL_SCOPE_KEY = "toolgate.principal"
ROLES_SCOPE_KEY = "toolgate.roles"
"""The roles the caller's credential carries (a JWT's), for the policy input."""
AUTH_METHOD_SCOPE_KEY = "toolgate.auth_method"


@dataclass(frozen=True, slots=True)
class Door:
    """What a handler needs of the HTTP request that carried the message."""

    services: Runtime
    principal: str
    roles: tuple[str, ...]
    auth_method: str
    base_url: str
    tasks: Any
    traceparent: str | None
    """The request's ``traceparent`` header (its first), for a call whose ``_meta`` has none."""
    session_id: str | None

    @classmethod
    def of(cls, ctx: ServerRequestContext[Any, Any]) -> Door:
        request = ctx.request
        if not isinstance(request, Request):
            raise MCPError(code=INVALID_PARAMS, message="this endpoint is served over HTTP only")
        return cls.of_request(request)

    @classmethod
    def of_request(cls, request: Request, first: Mapping[str, str] | None = None) -> Door:
        """``first``: the request's headers this reads (``DOOR_HEADERS``), each name's first
        value, when the caller read them already (gateway/mcp/stateless.py)."""
        scope = request.scope
        principal = scope.get(PRINCIPAL_SCOPE_KEY)
        if not isinstance(principal, str):
            raise MCPError(code=INVALID_PARAMS, message="this endpoint is served over HTTP only")
        if first is None:
            first = Heads.of(scope["headers"], _DOOR).first
        state = request.app.state
        services = state.services.latest
        version = first.get("mcp-protocol-version")
        return cls(
            services=services,
            principal=principal,
            roles=tuple(scope.get(ROLES_SCOPE_KEY, ())),
            auth_method=str(scope.get(AUTH_METHOD_SCOPE_KEY, "")),
            base_url=services.settings.mcp.public_url or _base_url(request, first.get("host")),
            tasks=state.tasks,
            traceparent=first.get("traceparent"),
            # Only a 2025-11-25 session is one (the SDK checked it): in 2026-07-28 the
            # header is the client's say-so and names no run.
            session_id=(
                first.get("mcp-session-id")
                if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS
                else None
            ),
        )


DOOR_HEADERS = ("host", "mcp-protocol-version", "mcp-session-id", "traceparent")
"""The headers ``Door.of_request`` reads (their first values)."""
_DOOR = Wanted(DOOR_HEADERS)


_BASE_URLS: dict[tuple[Any, ...], str] = {}
"""Starlette's ``base_url`` by what it is made of (building it is a good part of a call's
time at this door); a few entries, forgotten all at once when there are too many."""


def _base_url(request: Request, host: str | None) -> str:
    """The request's scheme, ``Host`` (``host``) and root path: the ``Host`` is one of
    ``mcp.allowed_hosts`` (DNS-rebinding protection refused any other before a handler
    ran); ``mcp.public_url``, when set, is used instead (Door.of_request)."""
    scope = request.scope
    server = scope.get("server")
    root = scope.get("app_root_path", scope.get("root_path", ""))
    key = (scope.get("scheme"), tuple(server) if server else None, host, root)
    found = _BASE_URLS.get(key)
    if found is None:
        if len(_BASE_URLS) >= 64:
            _BASE_URLS.clear()
        found = _BASE_URLS[key] = str(request.base_url).rstrip("/")
    return found
