"""An httpx transport that connects only where egress control allows (any adapter may use it).

``GuardedBackend`` is an httpcore network backend whose every TCP connect resolves the
host, checks every address with ``gateway.adapters.shared.egress.resolve`` and connects to
a checked address: DNS rebinding cannot slip a refused address in between.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore
import httpx

from gateway.adapters.shared.egress import EgressPolicy, EgressRefused, IPAddress, resolve

# httpcore's DEBUG trace logs every request and response header, credentials included: the
# gateway never lets it through, whatever level the root logger is at. httpx's INFO line
# ("HTTP Request: POST <url> ...") is held back too: a record built, masked and written per
# request, which the caller's own records already hold (issue 33). Its warnings pass.
logging.getLogger("httpcore").setLevel(logging.INFO)
logging.getLogger("httpx").setLevel(logging.WARNING)


def guarded_transport(
    policy: EgressPolicy, *, ssl_context: ssl.SSLContext, limits: httpx.Limits
) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose connections are all made through ``GuardedBackend(policy)``.

    Give it to an ``httpx.AsyncClient`` with ``trust_env=False`` (a proxy from the
    environment would connect on the client's behalf, past the check). Only the
    ``networks`` of ``policy`` matter here; check hosts per request with ``check_host``.
    """
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, trust_env=False, limits=limits)
    # httpx takes no network backend argument, so its pool is replaced by an identical one
    # built with ours (httpcore's public API); httpx 0.28 keeps the pool in ``_pool``.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedBackend(policy),
    )
    return transport


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend whose every TCP connect goes through ``resolve``.

    The connection is made to a checked address, so a name that resolves differently the
    second time cannot reach a refused one. Unix sockets are refused outright.
    """

    def __init__(self, policy: EgressPolicy, inner: httpcore.AsyncNetworkBackend | None = None):
        self._policy = policy
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await resolve(host, port, self._policy)
                return await self._connect_any(addresses, port, local_address, socket_options)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc

    async def _connect_any(
        self,
        addresses: tuple[IPAddress, ...],
        port: int,
        local_address: str | None,
        socket_options: Iterable[Any] | None,
    ) -> httpcore.AsyncNetworkStream:
        failure = httpcore.ConnectError(f"no address to connect to on port {port}")
        for ip in addresses:
            try:
                stream = await self._inner.connect_tcp(
                    str(ip), port, local_address=local_address, socket_options=socket_options
                )
                return PooledStream(stream)
            except httpcore.ConnectError as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressRefused("unix sockets are not reachable through egress control")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PooledStream(httpcore.AsyncNetworkStream):
    """A connection's stream, answering httpcore's ``is_readable`` from its socket.

    The pool asks it of every idle connection each time a request comes or goes (a server
    that closed a kept-alive connection makes it readable); anyio's streams rebuild their
    whole table of attributes, a ``getpeername`` included, for each question. Everything
    else is the inner stream's.
    """

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return PooledStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _readable(self._socket)
        return self._inner.get_extra_info(info)


def _readable(sock: socket.socket | None) -> bool:
    """Would a read return at once (data, or the end of a closed connection)?"""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True  # gone: as good as closed
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([fd], [], [], 0)[0])
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))
