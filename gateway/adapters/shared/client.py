"""The server's one HTTP client: aiohttp behind egress control, one pool per set of networks.

Every request the gateway's server process sends goes through ``Client``: the HTTP
adapter's declared requests and probes (``gateway.adapters.http``), the approval
notifications (``gateway.notifications.sender``) and the identity provider's key set
(``gateway.http.jwks``). So there is one definition of each thing two libraries would each
define: the egress check at every connect, TLS (``ssl_context``, a tool's: the certifi bundle
unless a CA file is given; ``system_trust``, the gateway's own endpoints': the machine's
trust store), no redirect followed, no proxy from the environment, no cookie kept, and the
errors (``Unreachable``, ``Lost``). Timeouts are the caller's (a deadline around
the whole request, ``anyio.fail_after``): aiohttp's own timeout is off. httpx stays in the
clients (the kit, the CLI, ``toolgate mcp``), never in the server.

Why aiohttp (issue 33): its pool finds an idle connection by key in constant work, its
timers are the event loop's, and it parses in C; httpx over httpcore scanned every pooled
connection for each queued request and wrapped each socket read and write in a cancel
scope.

What egress control asks of a client (``gateway.adapters.shared.egress``), and where:

- every name is resolved once per connection, by ``_EgressResolver`` (``egress.resolve``:
  every address checked), with aiohttp's DNS cache off;
- every socket is made by ``_checked_socket`` for the one address it connects to, IP
  literals included (aiohttp does not resolve those): the connection is made to a checked
  address, so DNS rebinding cannot slip a refused one in;
- no proxy from the environment (``trust_env=False``), no cookie remembered
  (``DummyCookieJar``: one client serves every actor), no redirect followed (the adapter
  follows the declared ones itself, each hop checked).

A request whose destination is the operator's own configuration, not a tool's (the key
set at ``jwt.jwks_url``), is sent with ``ANY_NETWORK``: every address allowed but the cloud
metadata endpoints, through the same checked connect.

Idle connections are kept ``IDLE_SECONDS``, less than the keep-alive of the usual servers
(uvicorn, Node.js, Apache: 5 s), so the server is not the one closing a connection just as
a request is sent on it. When that race happens anyway (a server with a shorter keep-alive,
one that restarts), the request is sent again once, on a new connection, only if all hold:
the connection was a reused idle one, it ended before any response came, and the request
is safe to repeat (``retry_safe``: an idempotent method or a provider idempotency key). A
request that may have been processed is never sent again otherwise: aiohttp's own retry
is off (``_resend_once`` turns its errors into ``Lost``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import ipaddress
import os
import socket
import ssl
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import certifi
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.adapters.shared.egress import EgressPolicy, IPNetwork, check_address, resolve
from gateway.adapters.shared.urls import URL

IDLE_SECONDS = 2.0
"""How long an idle connection is kept: under the usual servers' 5 s keep-alive."""
ANY_NETWORK: tuple[IPNetwork, ...] = (
    ipaddress.IPv4Network("0.0.0.0/0"),
    ipaddress.IPv6Network("::/0"),
)
"""Every address but the cloud metadata endpoints (``egress.refusal``): for a URL the
operator configured, not a tool."""


@functools.cache
def ssl_context(cafile: Path | None = None) -> ssl.SSLContext:
    """A tool's: certificates verified against ``cafile``, by default the certifi bundle
    (made once per file: loading a bundle takes ~50 ms)."""
    return ssl.create_default_context(cafile=str(cafile or certifi.where()))


def system_trust() -> ssl.SSLContext:
    """The gateway's own endpoints' (its configuration's, not a tool's: the OPA server, the
    identity provider's key set, the notification receivers): certificates verified against
    the machine's trust store, where an operator adds an internal CA (``SSL_CERT_FILE`` or
    ``SSL_CERT_DIR`` name another)."""
    return ssl.create_default_context()


@dataclass(slots=True)
class Attempt:
    """What became of one request, filled in as it goes (the adapter reads it whatever
    ended the request: an error, the deadline, a cancellation)."""

    retry_safe: bool = False
    """Repeating it cannot duplicate a side effect (the plan's ``retry_safe``)."""
    sent: bool = False
    """A connection was handed to the request: from then on it may have left."""
    reused: bool = False
    """That connection had served a request before."""
    resent: bool = False
    status: int | None = None
    """Set once the response's head arrived."""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)


class Lost(Exception):
    """The connection failed after the request may have left, before the whole response
    head arrived: the server may have processed it."""


class Unreachable(Exception):
    """No connection could be made; nothing was sent. ``errno`` of the cause, if any;
    ``tls``, what failed of the TLS handshake, if that was it."""

    def __init__(self, errno: int | None, tls: str | None = None) -> None:
        super().__init__(errno)
        self.errno, self.tls = errno, tls

    @classmethod
    def of(cls, exc: BaseException) -> Unreachable:
        """What ``exc`` (and its causes) says of the failed connection. A TLS failure first:
        an ``ssl.SSLError`` is an ``OSError`` too, and a certificate not trusted carries
        errno 1, which would read as "operation not permitted"."""
        causes = list(_causes(exc))
        for seen in causes:  # aiohttp's own certificate error has no verify_message: its cause
            why = getattr(seen, "verify_message", None)
            if isinstance(seen, ssl.SSLCertVerificationError) and why:
                return cls(None, f"its certificate is not trusted ({why})")
        if any(isinstance(seen, ssl.SSLError) for seen in causes):
            return cls(None, "the TLS handshake failed")
        for seen in causes:
            if isinstance(seen, OSError) and seen.errno:
                return cls(seen.errno)
        return cls(None)

    @property
    def reason(self) -> str:
        """A short reason, from the errno or the TLS failure: never the raw text of the
        cause."""
        if self.tls is not None:
            return self.tls
        return os.strerror(self.errno).lower() if self.errno else "the connection could not be made"


_ATTEMPT: contextvars.ContextVar[Attempt] = contextvars.ContextVar("toolgate_http_attempt")


class Client:
    """Declared requests through one aiohttp session (and pool) per set of allowed
    networks: a pooled connection is only reused under the policy that checked it."""

    def __init__(
        self, *, ssl_context: ssl.SSLContext, limit: int, user_agent: str | None = None
    ) -> None:
        self._ssl = ssl_context
        self._limit = limit
        self._user_agent = user_agent
        self._sessions: dict[tuple[IPNetwork, ...], aiohttp.ClientSession] = {}

    @contextlib.asynccontextmanager
    async def open(
        self,
        attempt: Attempt,
        networks: tuple[IPNetwork, ...],
        method: str,
        url: URL,
        headers: Sequence[tuple[str, str]],
        content: bytes | None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send one request, redirects not followed; the response with its head read (in
        ``attempt`` too), its body left to the caller (``read_body``). Raises
        ``Unreachable``, ``Lost``, ``EgressRefused``, the resolver's ``ExecutionError`` or
        ``ValueError`` (a request aiohttp refuses)."""
        token = _ATTEMPT.set(attempt)
        try:
            response = await self._session(networks).request(
                method, url, headers=headers, data=content, allow_redirects=False
            )
        except aiohttp.InvalidUrlClientError:
            # aiohttp refuses a legacy numeric IPv4 host ("0", "127.1") before any resolver:
            # egress control judges it first, as the system would resolve it.
            await resolve(url.raw_host or "", url.port or 0, EgressPolicy(networks=networks))
            raise
        finally:
            _ATTEMPT.reset(token)
        async with response:
            attempt.status, attempt.headers = response.status, response.headers
            yield response

    def _session(self, networks: tuple[IPNetwork, ...]) -> aiohttp.ClientSession:
        session = self._sessions.get(networks)
        if session is None:
            connector = _GuardedConnector(
                EgressPolicy(networks=networks), ssl_context=self._ssl, limit=self._limit
            )
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                headers={"User-Agent": self._user_agent} if self._user_agent else None,
                skip_auto_headers=("Content-Type",),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                middlewares=(_resend_once,),
            )
            self._sessions[networks] = session
        return session

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()


async def _resend_once(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """The one retry there is (module docstring), and every failure after the connection was
    made turned into ``Lost``, which aiohttp does not retry."""
    attempt = _ATTEMPT.get()
    try:
        return await handler(request)
    except aiohttp.ClientConnectorError as exc:
        raise Unreachable.of(exc) from exc
    except (aiohttp.ClientConnectionError, aiohttp.ClientResponseError) as exc:
        if not (attempt.reused and attempt.retry_safe and not attempt.resent):
            raise Lost from exc
    attempt.resent = True
    try:
        return await handler(request)
    except aiohttp.ClientConnectorError as exc:
        raise Unreachable.of(exc) from exc
    except (aiohttp.ClientConnectionError, aiohttp.ClientResponseError) as exc:
        raise Lost from exc


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what caused it, and so on."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


async def read_body(
    response: aiohttp.ClientResponse, limit: int, buf: bytearray
) -> tuple[bool, str | None]:
    """Read at most ``limit`` bytes of the body into ``buf``: (truncated, problem). A body
    that goes on past ``limit`` is not read to its end (its connection is dropped)."""
    try:
        while chunk := await response.content.readany():
            room = limit - len(buf)
            if len(chunk) > room:
                buf += chunk[:room]
                return True, None
            buf += chunk
    except aiohttp.ClientPayloadError as exc:
        if "decode" in str(exc).lower():
            return True, "the body could not be decoded (bad content-encoding)"
        return True, "the connection failed while the body was being read"
    except aiohttp.ClientError:
        return True, "the connection failed while the body was being read"
    return False, None


class _GuardedConnector(aiohttp.TCPConnector):
    """A pool whose every connect is checked by egress control, and which tells the
    request's ``Attempt`` when it has a connection and whether it was a reused one."""

    def __init__(self, policy: EgressPolicy, *, ssl_context: ssl.SSLContext, limit: int):
        super().__init__(
            ssl=ssl_context,
            limit=limit,
            keepalive_timeout=IDLE_SECONDS,
            resolver=_EgressResolver(policy),
            use_dns_cache=False,
            happy_eyeballs_delay=None,
            socket_factory=lambda info: _checked_socket(info, policy),
        )
        self._served: weakref.WeakSet[Any] = weakref.WeakSet()

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.connector.Connection:
        connection = await super().connect(req, traces, timeout)
        attempt = _ATTEMPT.get(None)
        protocol = connection.protocol
        if attempt is not None:
            attempt.sent, attempt.reused = True, protocol in self._served
        self._served.add(protocol)
        return connection


class _EgressResolver(AbstractResolver):
    """Names resolved by ``egress.resolve``: refused unless every address is allowed."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await resolve(host, port, self._policy)
        return [
            ResolveResult(
                hostname=host,
                host=str(ip),
                port=port,
                family=socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in addresses
        ]

    async def close(self) -> None:
        pass


def _checked_socket(info: Any, policy: EgressPolicy) -> socket.socket:
    """The socket for one address aiohttp is about to connect to, once egress control
    allowed that very address (an IP literal reaches here without the resolver)."""
    family, kind, proto, _, address = info
    ip = str(address[0]).split("%")[0]
    check_address(ip, ipaddress.ip_address(ip), policy)
    return socket.socket(family=family, type=kind, proto=proto)
