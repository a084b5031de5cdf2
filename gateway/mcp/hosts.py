"""DNS-rebinding protection of ``/mcp``: ``Host`` and ``Origin`` checked whole, before the
SDK sees the request (docs/configuration.md: ``mcp.allowed_hosts``, ``mcp.allowed_origins``).

The SDK's own check takes a value under a ``name:*`` pattern as soon as it starts with
``name:``, so ``127.0.0.1:1@evil.example`` passed for ``127.0.0.1:*``. Here a value is parsed
first, strictly: ``Host`` is ``host[:port]``, ``Origin`` is ``scheme://host[:port]``, the host a
DNS name, an IPv4 address or a bracketed IPv6 address, the port 1 to 65535, and nothing else.
A parsed value is then accepted when it is listed exactly, or when it has a port and its part
before the port is listed as ``that:*``. What this accepts the SDK's check accepts too (it
runs after, on the paths that reach it), so both MCP paths answer a value alike. Imports
nothing of the SDK: a hostile request is refused before the SDK is even loaded
(``door.McpDoor``).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Scope

log = logging.getLogger(__name__)

_HOST = re.compile(
    r"(?P<name>\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
_ORIGIN = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>.*)", re.DOTALL)
_SHOWN = 100
"""The most of a refused value the log line repeats."""


def _authority(value: str) -> tuple[str, bool] | None:
    """``host[:port]`` parsed whole: (the host as written, whether a port follows); None
    if anything else is there."""
    found = _HOST.fullmatch(value)
    if found is None:
        return None
    port, ipv6 = found["port"], found["ipv6"]
    if port is not None and not 0 < int(port) <= 65535:
        return None
    if ipv6 is not None:
        try:
            ipaddress.IPv6Address(ipv6)
        except ValueError:
            return None
    return found["name"], port is not None


def host_parts(value: str) -> tuple[str, bool] | None:
    """A ``Host`` value's host and whether it has a port, or None if it is not exactly
    ``host[:port]``."""
    return _authority(value)


def origin_parts(value: str) -> tuple[str, bool] | None:
    """An ``Origin`` value's ``scheme://host`` and whether it has a port, or None if it is
    not exactly ``scheme://host[:port]``."""
    found = _ORIGIN.fullmatch(value)
    if found is None:
        return None
    parts = _authority(found["authority"])
    if parts is None:
        return None
    return f"{found['scheme']}://{parts[0]}", parts[1]


class _Allowed:
    """A list of allowed values: each exact, or ``base:*`` (``base`` with any port)."""

    def __init__(self, listed: Iterable[str]) -> None:
        listed = tuple(listed)
        self.exact = frozenset(v for v in listed if not v.endswith(":*"))
        self.any_port = frozenset(v[:-2] for v in listed if v.endswith(":*"))

    def admits(self, value: str, parts: tuple[str, bool] | None) -> bool:
        if parts is None:
            return False
        base, has_port = parts
        return value in self.exact or (has_port and base in self.any_port)


class HostGuard:
    """The ``Host`` and ``Origin`` checks of ``/mcp`` (see the module)."""

    def __init__(self, hosts: Iterable[str], origins: Iterable[str]) -> None:
        self._hosts = _Allowed(hosts)
        self._origins = _Allowed(origins)

    def refusal(self, scope: Scope) -> Response | None:
        """The answer to the request of ``scope``, or None if it may be served: a ``Host``
        not allowed is 421, an ``Origin`` (when there is one) not allowed 403, answered as
        the SDK answers them (the headers read as it reads them)."""
        headers = Headers(scope=scope)
        host, origin = headers.get("host"), headers.get("origin")
        if not host or not self._hosts.admits(host, host_parts(host)):
            log.warning("refused a request to /mcp for the Host %r", (host or "")[:_SHOWN])
            return Response("Invalid Host header", status_code=421)
        if origin and not self._origins.admits(origin, origin_parts(origin)):
            log.warning("refused a request to /mcp from the Origin %r", origin[:_SHOWN])
            return Response("Invalid Origin header", status_code=403)
        return None
