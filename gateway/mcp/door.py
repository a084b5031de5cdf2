"""``/mcp`` as the host app mounts it: the SDK is imported and its session manager started on
the first request, not at start-up.

The MCP SDK and its types are about 270 modules and 29 MB of a gateway's memory; a
deployment that only serves REST never pays for them. The first request to ``/mcp`` (any
request: the endpoint authenticates it) imports :mod:`gateway.mcp.endpoint`, builds the
:class:`~gateway.mcp.endpoint.McpEndpoint` and runs its session manager in this door's task
group until the host app stops; concurrent first requests wait for the one start. A request
whose ``Host`` or ``Origin`` is not allowed is refused first (``hosts.HostGuard``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import Receive, Scope, Send

from gateway.http.problems import problem
from gateway.mcp.hosts import HostGuard
from gateway.settings import Settings

if TYPE_CHECKING:
    from gateway.mcp.endpoint import McpEndpoint
    from gateway.runtime.admission import Gauge


class McpDoor:
    """The ASGI app of ``/mcp``; ``run()`` is its lifespan, entered by the host app's."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.endpoint: McpEndpoint | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._stop: anyio.Event | None = None
        self._starting = anyio.Lock()
        self._sessions: Gauge | None = None
        self.hosts = HostGuard(settings.mcp.allowed_hosts, settings.mcp.allowed_origins)
        """DNS-rebinding protection, whole values, ahead of both paths (the SDK's and
        ``stateless``) and of the SDK's import."""

    @contextlib.asynccontextmanager
    async def run(self, sessions: Gauge) -> AsyncIterator[None]:
        """``sessions``: what counts the 2025-11-25 sessions (see ``McpEndpoint.run``)."""
        self._sessions = sessions
        stop = anyio.Event()
        async with anyio.create_task_group() as tasks:
            self._tasks, self._stop = tasks, stop
            try:
                yield
            finally:
                self._tasks = None
                stop.set()  # the session manager's task ends its run() and returns
        self.endpoint = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.hosts.refusal(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return
        endpoint = self.endpoint or await self._start()
        if endpoint is None:
            not_ready = problem(503, "not_ready", "the MCP endpoint is not running", retryable=True)
            await not_ready(scope, receive, send)
            return
        await endpoint(scope, receive, send)

    async def _start(self) -> McpEndpoint | None:
        async with self._starting:
            if self.endpoint is None and self._tasks is not None:
                from gateway.mcp.endpoint import McpEndpoint

                endpoint = McpEndpoint(self.settings)
                await self._tasks.start(self._serve, endpoint)
                self.endpoint = endpoint
        return self.endpoint

    async def _serve(self, endpoint: McpEndpoint, *, task_status: Any) -> None:
        assert self._stop is not None and self._sessions is not None
        async with endpoint.run(self._sessions):
            task_status.started()
            await self._stop.wait()
