"""The egress proxy: every connection a browser context makes goes through it, or nowhere.

One ``EgressProxy`` per browser context listens on ``127.0.0.1`` (an ephemeral port); the
context is created with it as its proxy (``bypass: <-loopback>``, so loopback goes through
it too) and Chromium runs with QUIC off and WebRTC limited to proxied UDP. The proxy speaks:

- ``CONNECT host:port`` (HTTPS, ``wss:``), answered ``200`` and then relayed byte for byte;
- absolute-form requests ``GET http://host/path HTTP/1.1`` (cleartext HTTP and ``ws:``
  upgrades), forwarded in origin form with ``Connection: close`` (one request per
  connection, so a kept-alive connection cannot be reused for another host).

For each, the target is checked by ``gateway.adapters.shared.egress.check_url`` — the same
check as the HTTP adapter: allowed hosts, then DNS resolution here (every address) and every
address public or in an allowed network — and the proxy connects only to a checked
address, never resolving again (no DNS rebinding). A refused target is answered ``403``
before any connection is made, and ``on_refused`` is told what and why (the session puts it in the
call's ``refused_requests`` and the log). Chromium itself never resolves a page's names.

Bounded: the request head is read within ``HEAD_TIMEOUT`` and at most ``MAX_HEAD`` bytes,
resolving and connecting take at most ``CONNECT_TIMEOUT`` each, a relay ends after
``IDLE_TIMEOUT`` without a byte either way, and at most ``max_tunnels`` connections are
relayed at once (more get ``503``). Bytes are relayed in chunks, never whole bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from gateway.adapters.shared.egress import EgressPolicy, Lookup, check_url
from gateway.errors import ExecutionError

log = logging.getLogger("toolgate.browser")

HEAD_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 120.0
MAX_HEAD = 64 * 1024
MAX_TUNNELS = 64
CHUNK = 64 * 1024
_HOP_HEADERS = frozenset(
    {b"proxy-authorization", b"proxy-connection", b"connection", b"keep-alive", b"te"}
)


MARKER = "X-Toolgate-Egress"
"""The header of the proxy's own answers: ``refused``, or the ``net::ERR_…`` the browser
would have reported had it connected itself (a cleartext HTTP proxy answer looks like a page)."""


class _Refused(Exception):
    def __init__(self, status: int, reason: str, marker: str = "refused") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.marker = marker


class EgressProxy:
    """A loopback HTTP proxy that connects only where ``policy()`` allows."""

    def __init__(
        self,
        policy: Callable[[], EgressPolicy],
        on_refused: Callable[[str, str], None],
        *,
        lookup: Lookup | None = None,
        max_tunnels: int = MAX_TUNNELS,
    ) -> None:
        self._policy = policy
        self._on_refused = on_refused
        self._lookup = lookup
        self._slots = asyncio.Semaphore(max_tunnels)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- one client connection ------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self._slots.locked():
                with contextlib.suppress(TimeoutError, _Refused):  # read it, then say no
                    await asyncio.wait_for(_read_head(reader), HEAD_TIMEOUT)
                await _answer(writer, 503, "too many connections through the egress proxy")
                return
            async with self._slots:
                await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # aclose: this task is asyncio's own, nobody awaits it
            pass
        except Exception:
            log.exception("egress proxy: connection failed")
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(_read_head(reader), HEAD_TIMEOUT)
        except (TimeoutError, _Refused):
            await _answer(writer, 400, "bad or slow request to the egress proxy")
            return
        lines = head.split(b"\r\n")
        try:
            method, target, version = lines[0].decode("latin-1").split(" ")
            if not version.startswith("HTTP/1.") or not method.isalpha():
                raise ValueError(version)
        except ValueError:
            await _answer(writer, 400, "bad request line")
            return
        connect = method.upper() == "CONNECT"
        try:
            url = _url_of(target, connect)
            upstream_reader, upstream_writer = await self._open(url)
        except _Refused as exc:
            await _answer(writer, exc.status, exc.reason, exc.marker)
            return
        try:
            if connect:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                upstream_writer.write(_origin_form(method, url, version, lines[1:]))
                await upstream_writer.drain()
            await _relay(reader, writer, upstream_reader, upstream_writer)
        finally:
            upstream_writer.close()
            with contextlib.suppress(Exception):
                await upstream_writer.wait_closed()

    async def _open(self, url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Check ``url``, then connect to one of its checked addresses (never resolving again)."""
        try:
            destination = await asyncio.wait_for(
                check_url(url, self._policy(), lookup=self._lookup), CONNECT_TIMEOUT
            )
        except TimeoutError as exc:
            raise _Refused(
                504, "resolving the host took too long", "ERR_NAME_NOT_RESOLVED"
            ) from exc
        except ExecutionError as exc:
            self._on_refused(url[:500], exc.message)
            # the page gets no reason (it would learn what internal names resolve to)
            raise _Refused(403, "refused by the gateway's egress control") from exc
        marker = "ERR_CONNECTION_REFUSED"
        for address in destination.addresses:
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(str(address), destination.port), CONNECT_TIMEOUT
                )
            except TimeoutError:
                marker = "ERR_CONNECTION_TIMED_OUT"
            except OSError as exc:
                log.debug("egress proxy: %s at %s: %s", url[:200], address, exc)
        where = f"{destination.host}:{destination.port}"
        raise _Refused(502, f"cannot connect to {where}", marker)


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line and headers (the stream's limit, ``MAX_HEAD``, bounds them)."""
    try:
        return (await reader.readuntil(b"\r\n\r\n"))[:-4]
    except asyncio.LimitOverrunError as exc:
        raise _Refused(431, "request head too large") from exc
    except asyncio.IncompleteReadError as exc:
        raise _Refused(400, "connection closed") from exc


def _url_of(target: str, connect: bool) -> str:
    """The ``http(s)`` URL a request line's target stands for (``ws`` is judged as ``http``)."""
    if connect:
        host, sep, port = target.rpartition(":")
        if not sep or not port.isdigit() or not host or any(c in host for c in "/@?#\\"):
            raise _Refused(400, "CONNECT needs host:port")
        return f"https://{host}:{port}/"
    for scheme, twin in (("ws://", "http://"), ("wss://", "https://")):
        if target.lower().startswith(scheme):
            target = twin + target[len(scheme) :]
    if not target.lower().startswith(("http://", "https://")):
        raise _Refused(400, "only absolute http URLs and CONNECT are proxied")
    return target


def _origin_form(method: str, url: str, version: str, headers: list[bytes]) -> bytes:
    from gateway.adapters.shared.urls import parse_url

    path = parse_url(url).raw_path_qs or "/"
    upgrade = False
    kept: list[bytes] = []
    for line in headers:
        name = line.split(b":", 1)[0].strip().lower()
        if name == b"upgrade":
            upgrade = True
        if name not in _HOP_HEADERS:
            kept.append(line)
    kept.append(b"Connection: Upgrade" if upgrade else b"Connection: close")
    return b"\r\n".join([f"{method} {path} {version}".encode("latin-1"), *kept]) + b"\r\n\r\n"


async def _relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    """Copy bytes both ways until either side closes or nothing moves for ``IDLE_TIMEOUT``."""

    async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while True:
            chunk = await asyncio.wait_for(source.read(CHUNK), IDLE_TIMEOUT)
            if not chunk:
                with contextlib.suppress(OSError):
                    if sink.can_write_eof():
                        sink.write_eof()
                return
            sink.write(chunk)
            await sink.drain()

    tasks = [
        asyncio.ensure_future(pump(client_reader, upstream_writer)),
        asyncio.ensure_future(pump(upstream_reader, client_writer)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        # the upstream finishing ends the exchange; the client finishing only half-closes
        if not tasks[1].done() and not tasks[0].exception():
            await asyncio.wait([tasks[1]], timeout=IDLE_TIMEOUT)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _answer(
    writer: asyncio.StreamWriter, status: int, reason: str, marker: str = "refused"
) -> None:
    phrase = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large"}.get(
        status,
        {502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}.get(
            status, "Error"
        ),
    )
    body = reason.encode("utf-8", "replace")
    writer.write(
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n{MARKER}: {marker}\r\n"
        "Connection: close\r\n\r\n".encode("latin-1")
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()
