"""The bounds every request meets before any door sees it: the size of its headers and of its
body (docs/security.md#bounded-load).

``RequestBounds`` is the outermost middleware of the app (``server/app.py``), so REST, MCP and
the page are bounded alike, before authentication:

- header names and values over ``max_header_bytes``: 431 ``headers_too_large``. The HTTP
  server itself closes a connection whose request head passes that by more than
  ``HEAD_SLACK`` bytes (``gateway/http/server.py``), so no request head is ever held whole in memory
  beyond that;
- a ``Content-Length`` over ``max_body_bytes``: 413 ``payload_too_large`` before a byte of the
  body is read;
- a body sent without one (chunked) is counted as it arrives: the read that passes
  ``max_body_bytes`` raises :class:`PayloadTooLarge`, which the door answers with 413.

Routes with a smaller bound of their own (the approvals page's forms, the decision bodies)
check it too; this is the ceiling.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import PayloadTooLarge
from gateway.http.problems import error_problem, problem
from gateway.settings import Settings


class RequestBounds:
    """ASGI middleware: refuse what is too large before the app reads it."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.max_header_bytes = settings.max_header_bytes
        self.max_body_bytes = settings.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size, declared, chunked = 0, b"", False
        for name, value in scope["headers"]:  # one pass: this runs on every request
            size += len(name) + len(value)
            if name == b"content-length":
                declared = value
            elif name == b"transfer-encoding":
                chunked = True
        if size > self.max_header_bytes:
            detail = f"the request's headers hold {size} bytes, more than {self.max_header_bytes}"
            await problem(431, "headers_too_large", detail)(scope, receive, send)
            return
        if declared.strip().isdigit() and int(declared) > self.max_body_bytes:
            too_large = PayloadTooLarge(f"the body is larger than {self.max_body_bytes} bytes")
            await error_problem(too_large)(scope, receive, send)
            return
        if chunked:  # a declared length is held to by the HTTP server; chunks are counted here
            receive = _counted(receive, self.max_body_bytes)
        await self.app(scope, receive, send)


def _counted(receive: Receive, limit: int) -> Receive:
    """``receive`` that raises :class:`PayloadTooLarge` once the body passes ``limit``."""
    seen = 0

    async def bounded() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise PayloadTooLarge(f"the body is larger than {limit} bytes")
        return message

    return bounded
