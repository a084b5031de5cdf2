"""How uvicorn serves the gateway: the fastest HTTP implementation installed, with the request
head bounded at the server (docs/security.md#bounded-load).

uvicorn parses HTTP with ``httptools`` (C, llhttp) when it is installed and with ``h11`` (pure
Python) otherwise; the difference is a few hundred µs of CPU per request. h11 bounds a request
head itself (``h11_max_incomplete_event_size``); httptools does not: it buffers a header value
until it is complete, however long. :class:`BoundedHttpTools` adds that bound: it counts the
bytes a connection sends while a request head is open and answers 431 and closes once they pass
``max_header_bytes + HEAD_SLACK``, so no request head is held in memory beyond that (and one
read of the transport) whichever implementation runs. It also gives each request
``request_read_timeout`` to arrive whole, head and body, from the connection's first byte or
the request's (uvicorn times out only a connection idle between requests): a client that
opens connections and sends nothing, or a byte now and then, would otherwise hold each one
for ever, until the process runs out of file descriptors for everyone. The event loop is
uvloop where it is installed (uvicorn's ``auto``).

The gateway binds its socket itself (:func:`listen`), before it says ``listening on`` and
before the application starts, and hands it to uvicorn (:func:`run`): a port in use is one
line and exit :data:`EXIT_CANNOT_LISTEN`, the same for ``serve`` and ``serve --workers N``,
whose workers get the parent's socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.errors import CannotListen
from gateway.settings import Settings

EXIT_CANNOT_LISTEN = 4
"""``toolgate serve``'s exit status when it cannot bind its address (docs/configuration.md)."""
EXIT_START_FAILED = 3
"""``toolgate serve``'s exit status when the application fails to start (uvicorn's)."""
BACKLOG = 2048

_WHY = {
    errno.EADDRINUSE: "the address is in use (another gateway? choose a port with --port,"
    " TOOLGATE_PORT or port: in toolgate.yaml)",
    errno.EACCES: "permission denied (a port below 1024 needs privileges; choose a port with"
    " --port, TOOLGATE_PORT or port: in toolgate.yaml)",
    errno.EADDRNOTAVAIL: "the address is not one of this host's (choose one with --host,"
    " TOOLGATE_HOST or host: in toolgate.yaml)",
}


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening; :class:`CannotListen` says why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        why = _WHY.get(exc.errno or 0) or exc.strerror or str(exc)
        raise CannotListen(f"cannot listen on {address(host, port)}: {why}") from exc
    return sock


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run(
    open_app: Callable[[], Awaitable[Any]],
    sock: socket.socket,
    settings: Settings,
    log_level: str,
    access_log: bool,
) -> int:
    """Serve the app ``open_app`` makes, in the loop that serves it, on ``sock`` until
    SIGTERM/SIGINT; 0, or :data:`EXIT_START_FAILED`. What ``open_app`` raises is raised."""
    import uvicorn

    def config(app: Any) -> uvicorn.Config:
        return uvicorn.Config(
            app,
            **serve_options(settings),
            log_level=log_level,
            access_log=access_log,
            server_header=False,
            log_config=None,
        )

    server: uvicorn.Server | None = None

    async def serve() -> None:
        nonlocal server
        server = uvicorn.Server(config(await open_app()))
        await server.serve(sockets=[sock])

    # uvicorn raises the SIGINT it caught again once it has stopped: that is the end, not an error.
    with (
        contextlib.suppress(KeyboardInterrupt),
        asyncio.Runner(loop_factory=config(None).get_loop_factory()) as runner,
    ):
        runner.run(serve())
    return 0 if server is not None and server.started else EXIT_START_FAILED


HEAD_SLACK = 8 * 1024
"""What the HTTP server allows a request head beyond ``max_header_bytes`` (the request line,
the separators), so that a head just over the bound still gets a 431 that says why."""


def serve_options(settings: Settings) -> dict[str, Any]:
    """The options of ``uvicorn.run`` (and ``uvicorn.Config``) for the gateway's server."""
    return {
        "http": http_protocol(settings.request_read_timeout),
        "h11_max_incomplete_event_size": settings.max_header_bytes + HEAD_SLACK,
    }


def http_protocol(read_timeout: float) -> Any:
    """:class:`BoundedHttpTools` (each request given ``read_timeout`` seconds to arrive) when
    httptools is installed, else uvicorn's h11."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    protocol: Callable[..., Any] = _bounded_httptools()
    return functools.partial(protocol, read_timeout=read_timeout)


_CLASS: type[Any] | None = None


def _bounded_httptools() -> type[Any]:
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class BoundedHttpTools(HttpToolsProtocol):
        """uvicorn's httptools protocol with the request head bounded (see the module)."""

        def __init__(self, config: Any, *args: Any, read_timeout: float, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            self._read_timeout = read_timeout
            self._read_timer: asyncio.TimerHandle | None = None
            self._head_limit: int = config.h11_max_incomplete_event_size
            self._head_open = True
            self._head_bytes = 0
            self._refused = False
            self._heads = 0  # request heads completed on this connection

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            open_before, heads = self._head_open, self._heads
            super().data_received(data)
            # The whole chunk belonged to one unfinished head only if a head was open before
            # and after it and none completed in between; otherwise the chunk held a body or a
            # head's end (bounded by one read, uvicorn's transport reads 64-256 KiB at most).
            if open_before and self._head_open and heads == self._heads:
                self._head_bytes += len(data)
                if self._head_bytes > self._head_limit:
                    self._refuse_head()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()  # a connection that never sends a byte is timed too

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            self._head_open = True
            self._arm()
            super().on_message_begin()

        def on_message_complete(self) -> None:
            self._disarm()  # the request is whole: its answer may take as long as it takes
            super().on_message_complete()

        def _arm(self) -> None:
            self._disarm()
            self._read_timer = self.loop.call_later(self._read_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _too_slow(self) -> None:
            """The request did not arrive whole in time: 408 while its head is still open
            (no answer has begun), and the connection closed either way (an application
            reading the body sees the client gone)."""
            self._read_timer = None
            if self.transport.is_closing():
                return
            if self._head_open:
                self._refuse(b"408 Request Timeout", b"request not received in time")
            else:
                self.transport.close()

        def on_headers_complete(self) -> None:
            self._head_open = False
            self._head_bytes = 0
            self._heads += 1
            super().on_headers_complete()

        def _refuse_head(self) -> None:
            self._refuse(b"431 Request Header Fields Too Large", b"request head too large")

        def _refuse(self, status: bytes, body: bytes) -> None:
            self.transport.write(
                b"HTTP/1.1 " + status + b"\r\n"
                b"content-type: text/plain; charset=utf-8\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n"
                b"connection: close\r\n\r\n" + body
            )
            self.transport.close()
            self._refused = True  # nothing more is read from this connection

    _CLASS = BoundedHttpTools
    return _CLASS
