"""The one place the gateway uses what the MCP SDK does not publish.

The SDK offers no public hook for these, so each use is here, written for one version of
it (``WRITTEN_FOR``; tests/mcp/test_sdk_private.py fails, naming this module, when the
installed SDK is another, so that each use is checked again before it is trusted):

- ``HookedSessionManager``: the session manager's admission and discard of a 2025-11-25
  session (its ``_admit_session`` and ``_discard_session``), which the gateway counts
  against the principal that opened it, and whether its transport runs (its
  ``_task_group``, which ``handle_request`` tests);
- ``only_the_sdks_span``: the SDK's default middleware, ``OpenTelemetryMiddleware``, from
  its private ``mcp.server._otel``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

WRITTEN_FOR = "2.3.0"
"""The version of the ``mcp`` distribution these uses were written for and read against."""


def installed() -> str:
    """The version of the ``mcp`` distribution installed."""
    return version("mcp")


def only_the_sdks_span(middleware: Sequence[Any]) -> bool:
    """Whether ``middleware`` is the SDK's default list: its span (``Server.middleware``
    starts with one ``OpenTelemetryMiddleware``)."""
    return len(middleware) == 1 and type(middleware[0]) is OpenTelemetryMiddleware


Admit = Callable[[], StreamableHTTPServerTransport | None]


class HookedSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with two hooks a subclass overrides, and ``running``."""

    def admit_session(self, admit: Admit) -> StreamableHTTPServerTransport | None:
        """A request opens a session: ``admit()`` admits it as the SDK does (None at its
        limit); return its transport, or None to refuse it (the SDK answers 503)."""
        return admit()

    def session_discarded(self, session_id: str) -> None:
        """The session ``session_id`` is gone (``DELETE``, the idle timeout, an opening
        request that failed), or was never opened."""

    @property
    def running(self) -> bool:
        """Whether the SDK's transport would serve a request (``_handle_request``)."""
        return self._task_group is not None

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        parent = super()._admit_session
        return self.admit_session(lambda: parent(requestor))

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        self.session_discarded(session_id)
        await super()._discard_session(session_id, transport)
