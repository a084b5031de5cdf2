"""``/mcp``: the SDK's low-level server behind the gateway's API keys and JWTs.

``McpEndpoint`` is an ASGI app (mounted as a route in gateway/server/app.py) that takes the
caller authenticated exactly as for the REST door (401 with ``WWW-Authenticate`` otherwise,
naming the resource metadata when JWTs are configured: gateway/mcp/oauth.py), records the
principal and its roles in the request scope and hands the request to the SDK's
streamable-HTTP session manager, which serves both eras: 2025-11-25 sessions (the
``initialize`` handshake) and 2026-07-28's self-contained requests, but for a plain
2026-07-28 ``tools/call``, which gateway/mcp/stateless.py answers as the SDK would.
``run()`` is the session manager's lifespan; the host app enters it in its own (Starlette
runs no mounted lifespan).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pydantic_core
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.caching import CacheHint
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from gateway import __version__
from gateway.errors import ToolgateError
from gateway.http.auth import IDENTITY_SCOPE_KEY, identity_of
from gateway.http.bodies import read_body, replay
from gateway.http.heads import Heads
from gateway.http.problems import error_problem, problem
from gateway.mcp import calls, context, oauth
from gateway.mcp.sdk_private import Admit, HookedSessionManager
from gateway.mcp.stateless import READ, StatelessCalls, is_request_id, serves_plain_calls
from gateway.runtime.admission import Gauge
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


def build_server() -> Server[Any]:
    server = _ToolgateServer(
        "toolgate",
        version=__version__,
        title="Toolgate",
        instructions=INSTRUCTIONS,
        on_list_tools=calls.list_tools,  # type: ignore[arg-type]
        on_call_tool=calls.call_tool,  # type: ignore[arg-type]
        get_tool_input_schema=calls.no_param_headers,
        # What a principal may see changes with the policy: never serve a cached listing.
        cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
    )
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, calls.get_task)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, calls.task_result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, calls.cancel_task)
    server.extensions = {calls.TASKS_EXTENSION: {}}
    server.middleware.append(calls.legacy_task_call)
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
        self.manager: _BoundedSessions | None = None
        self.stateless: StatelessCalls | None = None
        """The plain calls of the 2026-07-28 era, answered without the SDK's transport
        (None: every request goes to the SDK)."""
        if settings.mcp.fast_calls and serves_plain_calls(self.server):
            self.stateless = StatelessCalls(self.server, security, settings.max_body_bytes)

    @contextlib.asynccontextmanager
    async def run(self, sessions: Gauge) -> AsyncIterator[None]:
        """The session manager's lifetime (a manager runs once: each run makes a new one);
        ``sessions`` counts the 2025-11-25 sessions it holds open, per principal."""
        mcp = self.settings.mcp
        manager = _BoundedSessions(
            app=self.server,
            security_settings=self._security,
            max_request_body_size=self.settings.max_body_bytes,
            session_idle_timeout=mcp.session_idle_timeout,
            max_sessions=mcp.max_sessions_total,
            sessions=sessions,
        )
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None
                manager.forget_all()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        heads = Heads.of(scope["headers"], READ)
        version = heads.first.get(MCP_PROTOCOL_VERSION_HEADER)
        # The request goes to the SDK's 2026-07-28 entry (``_handle_request``'s test).
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        try:
            identity = identity_of(request)
            if not modern and _opens_session(request):  # (a modern request never does)
                request.app.state.services.admission.sessions.check(identity.principal)
        except ToolgateError as exc:
            response = error_problem(exc)
            jwt = request.app.state.services.settings.jwt
            if exc.http_status == 401 and jwt is not None:
                sent = scope.get(IDENTITY_SCOPE_KEY) is not None
                header = oauth.challenge(jwt, "invalid_token" if sent else None)
                response.headers["WWW-Authenticate"] = header
            await response(scope, receive, send)
            return
        principal = identity.principal
        scope[context.PRINCIPAL_SCOPE_KEY] = principal
        scope[context.ROLES_SCOPE_KEY] = identity.roles
        scope[context.AUTH_METHOD_SCOPE_KEY] = identity.method
        if not modern:
            # The session manager binds a 2025-11-25 session to the credential that opened it.
            token = AccessToken(token="", client_id=principal, scopes=[], subject=principal)
            scope["user"] = AuthenticatedUser(token)
        manager = self.manager
        if manager is None:
            not_ready = problem(503, "not_ready", "the MCP endpoint is not running", retryable=True)
            await not_ready(scope, receive, send)
            return
        if modern and self.stateless is not None and manager.running:
            # Ahead of the SDK's body bound, which never refuses what reaches it: the
            # gateway's (RequestBounds, the same max_body_bytes) refuses it first.
            rest = await self.stateless(request, heads, send)
            if rest is None:
                return
            receive = rest
        elif not modern and scope["method"] == "POST":
            # Read here as at every door: the SDK's transport logs a client gone mid-body as
            # an error, with its traceback (a log any client could fill by hanging up).
            body = await read_body(
                receive, self.settings.max_body_bytes, heads.first.get("content-length")
            )
            if not _is_message(body):
                await _NOT_A_MESSAGE(scope, receive, send)
                return
            receive = replay(body, receive)
        opener = _OPENER.set(principal)
        try:
            await manager.handle_request(scope, receive, send)
        finally:
            _OPENER.reset(opener)


_NOT_A_MESSAGE = JSONResponse(
    {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": types.INVALID_REQUEST,
            "message": "Invalid Request: the body must be one JSON-RPC request,"
            " notification or response object",
        },
    },
    400,
)
"""The answer to JSON that is no JSON-RPC message. The SDK's 2025-11-25 transport answers
it with -32602 and pydantic's text (its version, the SDK's class names, the input echoed)."""


def _is_message(body: bytes) -> bool:
    """Whether ``body`` is one JSON-RPC message as the SDK's transport reads it, its id (if
    any) an id, or is not JSON at all (the SDK's own parse error says so plainly)."""
    try:
        raw = pydantic_core.from_json(body)
    except ValueError:
        return True
    if isinstance(raw, dict) and raw.get("id") is not None and not is_request_id(raw["id"]):
        return False  # the SDK reads a request whose id is an object as a notification
    try:
        types.jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except ValidationError:
        return False
    return True


def _opens_session(request: Request) -> bool:
    """A request the session manager would open a 2025-11-25 session for (if it is an
    ``initialize``): a POST with no session id, in no protocol era after the handshake's."""
    headers = request.headers
    version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    return (
        request.method == "POST"
        and MCP_SESSION_ID_HEADER not in headers
        and (version is None or version in HANDSHAKE_PROTOCOL_VERSIONS)
    )


_OPENER: contextvars.ContextVar[str | None] = contextvars.ContextVar("mcp_opener", default=None)
"""The principal of the request being handed to the session manager (it admits a session
within that call, on the same task)."""


class _BoundedSessions(HookedSessionManager):
    """The SDK's session manager, counting each session it holds against the principal that
    opened it (``Runtime.admission.sessions``), from its admission until it is discarded,
    however it ends: ``DELETE``, the idle timeout, an opening request that failed.

    ``McpEndpoint`` checks the share before handing a request over (429/503 with
    ``Retry-After``); a session that races past that check is refused here, and the SDK
    answers it 503."""

    def __init__(self, *args: Any, sessions: Gauge, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gauge = sessions
        self._opened_by: dict[str, str] = {}

    def admit_session(self, admit: Admit) -> StreamableHTTPServerTransport | None:
        principal = _OPENER.get()
        if principal is None:
            return admit()
        try:
            self._gauge.take(principal)
        except ToolgateError:
            return None
        transport = admit()
        if transport is None or transport.mcp_session_id is None:
            self._gauge.give_back(principal)
            return None
        self._opened_by[transport.mcp_session_id] = principal
        return transport

    def session_discarded(self, session_id: str) -> None:
        principal = self._opened_by.pop(session_id, None)
        if principal is not None:
            self._gauge.give_back(principal)

    def forget_all(self) -> None:
        """The manager stopped: every session it held is gone."""
        for principal in self._opened_by.values():
            self._gauge.give_back(principal)
        self._opened_by.clear()
