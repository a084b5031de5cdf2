"""``/mcp``: the SDK's low-level server behind the gateway's API keys and JWTs.

``McpEndpoint`` is an ASGI app (mounted as a route in gateway/server/app.py) that takes the
caller authenticated exactly as for the REST door (401 with ``WWW-Authenticate`` otherwise,
naming the resource metadata when JWTs are configured: gateway/mcp/oauth.py), records the
principal and its roles in the request scope and hands the request to the SDK's
streamable-HTTP session manager, which serves both eras: 2025-11-25 sessions (the
``initialize`` handshake) and 2026-07-28's self-contained requests. ``run()`` is the session
manager's lifespan; the host app enters it in its own (Starlette runs no mounted lifespan).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gateway import __version__
from gateway.errors import ToolgateError
from gateway.http.auth import IDENTITY_SCOPE_KEY, identity_of
from gateway.http.problems import problem
from gateway.mcp import calls, oauth
from gateway.settings import Settings

INSTRUCTIONS = (
    "Toolgate runs each tool call through policy, approvals, idempotency, locks and "
    "verification. A call that needs a person's approval answers at once with the approval "
    "id; see https://toolgate.dev/docs/mcp for the io.toolgate/* _meta keys."
)


class _ToolgateServer(Server[Any]):
    """Advertises 2025-11-25 task support (the SDK derives capabilities from handlers and
    has no tasks runtime of its own)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        if kwargs.get("protocol_version") in MODERN_PROTOCOL_VERSIONS:
            return caps
        tasks = types.ServerTasksCapability(
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )
        return caps.model_copy(update={"tasks": tasks})


async def _legacy_task_call(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """A 2025-11-25 ``tools/call`` with ``params.task`` may be answered with a
    ``CreateTaskResult``, which the SDK's result check for ``tools/call`` would refuse: such
    a call is handled here, ahead of that check. Everything else passes through."""
    params = ctx.params or {}
    if (
        ctx.method != "tools/call"
        or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        or not isinstance(params.get("task"), dict)
    ):
        return await call_next(ctx)
    try:
        typed = types.CallToolRequestParams.model_validate(params, by_name=False)
    except ValidationError as exc:
        raise MCPError(code=INVALID_PARAMS, message="invalid tools/call params") from exc
    return await calls.call_tool(ctx, typed)


def build_server() -> Server[Any]:
    server = _ToolgateServer(
        "toolgate",
        version=__version__,
        title="Toolgate",
        instructions=INSTRUCTIONS,
        on_list_tools=calls.list_tools,  # type: ignore[arg-type]
        on_call_tool=calls.call_tool,  # type: ignore[arg-type]
        # Mcp-Param-* header checks: the published schemas declare no x-mcp-header, so
        # there is nothing to check (and no need to list the tools on every call).
        get_tool_input_schema=lambda name: None,
        # What a principal may see changes with the policy: never serve a cached listing.
        cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
    )
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, calls.get_task)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, calls.task_result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, calls.cancel_task)
    server.extensions = {calls.TASKS_EXTENSION: {}}
    server.middleware.append(_legacy_task_call)
    return server


class McpEndpoint:
    """The ASGI app of ``/mcp``: authentication in front of the SDK's session manager."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server = build_server()
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(settings.mcp.allowed_hosts),
            allowed_origins=list(settings.mcp.allowed_origins),
        )
        self._security = security
        self.manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The session manager's lifetime (a manager runs once: each run makes a new one)."""
        manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=self._security,
            max_request_body_size=self.settings.max_body_bytes,
        )
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            identity = identity_of(request)
        except ToolgateError as exc:
            response = problem(exc.http_status, exc.code, exc.message)
            jwt = request.app.state.services.settings.jwt
            if exc.http_status == 401 and jwt is not None:
                sent = scope.get(IDENTITY_SCOPE_KEY) is not None
                header = oauth.challenge(jwt, "invalid_token" if sent else None)
                response.headers["WWW-Authenticate"] = header
            await response(scope, receive, send)
            return
        principal = identity.principal
        scope[calls.PRINCIPAL_SCOPE_KEY] = principal
        scope[calls.ROLES_SCOPE_KEY] = identity.roles
        scope[calls.AUTH_METHOD_SCOPE_KEY] = identity.method
        # The session manager binds a 2025-11-25 session to the credential that opened it.
        token = AccessToken(token="", client_id=principal, scopes=[], subject=principal)
        scope["user"] = AuthenticatedUser(token)
        if self.manager is None:
            await problem(503, "not_ready", "the MCP endpoint is not running")(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)
