"""The Starlette application: routes, the error mapping and the services' lifespan."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway.errors import ToolgateError
from gateway.http.auth import Authenticator, AuthMiddleware
from gateway.http.limits import RequestBounds
from gateway.http.problems import HANDLERS
from gateway.mcp import oauth
from gateway.mcp.door import McpDoor
from gateway.runtime import approvals, replicas
from gateway.runtime.bootstrap import Loaded, close_runtime, open_runtime
from gateway.runtime.container import Runtime
from gateway.runtime.recovery import recover
from gateway.runtime.reload import Reloader
from gateway.runtime.worker import run_workers
from gateway.server import artifacts, routes
from gateway.server.openapi import build_openapi
from gateway.settings import Settings
from gateway.ui.routes import ROUTES as UI_ROUTES

log = logging.getLogger("toolgate.server")


async def open_app(settings: Settings, loaded: Loaded | None = None) -> Starlette:
    """``toolgate serve``'s app, its runtime opened now, in the loop that serves it, before
    the server starts: a start that fails (a directory that cannot be made, a key that does
    not read, a store that does not answer) raises its own error, which the command prints
    in one line, rather than failing the ASGI lifespan, which uvicorn prints as a traceback.
    The app's lifespan closes the runtime when the server stops."""
    return create_app(settings, await open_runtime(settings, loaded), owned=True)


def create_app(
    settings: Settings,
    services: Runtime | None = None,
    loaded: Loaded | None = None,
    owned: bool = False,
) -> Starlette:
    """An app that opens its services on startup (or uses ``services`` as given, and closes
    them at shutdown only when ``owned``; ``loaded``: the sources already read, so that
    start-up does not parse them again)."""
    openapi = build_openapi()
    mcp = McpDoor(settings)
    authenticator = Authenticator(settings)

    async def openapi_json(request: Request) -> Response:
        routes.principal_of(request)
        return JSONResponse(openapi)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        closes = owned or services is None
        app.state.services = services or await open_runtime(settings, loaded)
        app.state.authenticator = authenticator
        app.state.mcp = mcp  # the MCP door (its endpoint, once started, counts fast calls)
        app.state.reloader = reloader = Reloader(app.state.services)
        signalled = reloader.install_signal()
        try:
            await replicas.join(app.state.services)  # a lease before it owns anything
            began = time.monotonic()
            settled = await recover(app.state.services)
            if settled:
                took = time.monotonic() - began
                log.warning("recovered %d interrupted executions in %.2f s", len(settled), took)
            sessions = app.state.services.admission.sessions
            async with anyio.create_task_group() as tasks, mcp.run(sessions):
                app.state.tasks = tasks
                tasks.start_soon(replicas.heartbeat, app.state.services)
                tasks.start_soon(_sweeper, app.state.services)
                tasks.start_soon(run_workers, app.state.services)
                tasks.start_soon(reloader.run)
                yield
                tasks.cancel_scope.cancel()
            await replicas.leave(app.state.services)
        finally:
            if signalled:
                reloader.remove_signal()
            if closes:
                await close_runtime(app.state.services)

    table = [  # the router tries each route in turn: the calls' routes first
        _route("/v1/executions", routes.create_execution, ["POST"]),
        Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]),
        _route("/v1/executions", routes.list_executions, ["GET"]),
        _route("/v1/executions/{execution_id}", routes.get_execution, ["GET"]),
        _route("/v1/executions/{execution_id}/events", routes.execution_events, ["GET"]),
        _route("/v1/executions/{execution_id}/cancel", routes.cancel_execution, ["POST"]),
        _route("/v1/executions/{execution_id}/resolve", routes.resolve_execution, ["POST"]),
        _route("/v1/runs/{run_id}/events", routes.run_events, ["GET"]),
        _route("/v1/plans", routes.create_plan, ["POST"]),
        _route("/v1/cancellations", routes.cancel_by_token, ["POST"]),
        _route("/v1/tools", routes.list_tools, ["GET"]),
        _route("/v1/tools/{name}", routes.get_tool, ["GET"]),
        _route("/v1/approvals", routes.list_approvals, ["GET"]),
        _route("/v1/approvals/{approval_id}", routes.get_approval, ["GET"]),
        _route("/v1/approvals/{approval_id}/approve", routes.approve, ["POST"]),
        _route("/v1/approvals/{approval_id}/deny", routes.deny, ["POST"]),
        _route("/v1/artifacts/{artifact_id}", artifacts.get_artifact, ["GET"]),
        _route("/v1/policy/bundle", routes.policy_bundle, ["GET"]),
        _route("/v1/admin/reload", routes.reload, ["POST"]),
        _route("/metrics", routes.metrics, ["GET"]),
        _route("/healthz", routes.healthz, ["GET"]),
        _route("/readyz", routes.readyz, ["GET"]),
        _route("/openapi.json", openapi_json, ["GET"]),
        _route(oauth.WELL_KNOWN, oauth.protected_resource, ["GET"]),
        _route(oauth.WELL_KNOWN + "/{path:path}", oauth.protected_resource, ["GET"]),
        *UI_ROUTES,
    ]
    return Starlette(
        routes=table,
        middleware=[
            Middleware(RequestBounds, settings=settings),  # first: bounds before anything reads
            Middleware(AuthMiddleware, authenticator=authenticator),
        ],
        exception_handlers=dict(HANDLERS),
        lifespan=lifespan,
    )


class _Handler:
    """A handler ``(request) -> response`` as its route's ASGI app. Starlette's
    ``request_response`` would run each call inside a second exception layer (another
    Request, another send wrapper) below the ExceptionMiddleware, which maps whatever the
    handler raises with the same ``HANDLERS``."""

    __slots__ = ("handler",)

    def __init__(self, handler: Callable[[Request], Awaitable[Response]]) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.handler(Request(scope, receive, send))
        await response(scope, receive, send)


def _route(
    path: str, handler: Callable[[Request], Awaitable[Response]], methods: list[str]
) -> Route:
    return Route(path, _Handler(handler), methods=methods, name=handler.__name__)


async def _sweeper(services: Runtime) -> None:
    """Expire overdue approvals and idempotency keys, every ``sweep_interval`` seconds."""
    while True:
        await anyio.sleep(services.settings.sweep_interval)
        try:
            await approvals.sweep(services.latest)
        except ToolgateError as exc:
            log.warning("sweep failed: %s", exc)
