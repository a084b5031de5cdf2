"""Egress control: may a tool's request leave for this URL, and to which addresses?

Every outbound connection an adapter makes for a tool passes two checks:

1. **host**: the URL's scheme is http or https and its host (IDNA, lower case) is in the
   tool's allowlist — an exact name or IP, ``*.example.com`` (subdomains only) or ``*``;
2. **address**: after DNS resolution, *every* address the host resolves to is public, or
   lies in a network the tool allows explicitly (``allow_networks``).

Refused unless allowed: loopback, private (RFC 1918, unique local), link-local, shared
(CGNAT), unspecified, multicast and reserved addresses; IPv4 inside IPv6 (mapped, 6to4,
NAT64) is judged by its IPv4 address. Cloud metadata endpoints (``169.254.169.254`` and
kin) stay refused inside an allowed range; only a network naming exactly that address
(a /32 or /128) opens one.

The caller must connect to the addresses that were checked, never resolve the name again,
or DNS rebinding could slip a refused address in between. The server's one HTTP client
(``gateway.adapters.shared.client``) does that: every connect of its pools resolves, checks
and connects to the checked address; nothing else needs to be trusted. The browser's egress
proxy connects to the addresses ``check_url`` returns.

Public surface: ``EgressDecl`` (the ``egress:`` key of a declaration), ``EgressPolicy``,
``EgressRefused``, ``parse_network``, ``check_host``, ``resolve``, ``check_address``,
``check_url`` and ``refusal``. This module imports no HTTP library (URLs are parsed by
``shared.urls``, imported by ``check_url`` when it is first called), so declaration specs
may use it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from pydantic import BeforeValidator, WithJsonSchema, field_validator

from gateway.declarations.model import Frozen
from gateway.errors import ExecutionError

if TYPE_CHECKING:
    from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = frozenset({"http", "https"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS pod identity
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS over IPv6
        "fd00:ec2::23",
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class EgressRefused(ExecutionError):
    """The destination is not allowed for this tool; nothing was sent."""

    code = "egress_refused"
    retryable = False


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """What one tool may reach. Hashable: connection pools are kept per policy."""

    hosts: frozenset[str] = frozenset()
    """Allowed hosts, normalised by ``normalise_host``; ``*`` allows any host."""
    networks: tuple[IPNetwork, ...] = ()
    """Networks whose addresses are allowed although they are not public."""

    @classmethod
    def build(cls, hosts: Iterable[str], networks: Iterable[str | IPNetwork]) -> EgressPolicy:
        """A policy from declared strings; raises ValueError naming a bad entry."""
        return cls(
            frozenset(normalise_host(h) for h in hosts),
            tuple(dict.fromkeys(parse_network(n) for n in networks)),
        )

    def permits_host(self, host: str) -> bool:
        name = normalise_host(host)
        if "*" in self.hosts or name in self.hosts:
            return True
        return any(p.startswith("*.") and name.endswith(p[1:]) for p in self.hosts)


@dataclass(frozen=True, slots=True)
class Destination:
    """A checked URL: where it may go, and the only addresses to connect to."""

    url: URL
    host: str
    port: int
    addresses: tuple[IPAddress, ...]


def normalise_host(host: str) -> str:
    """Lower case, no trailing dot, IDNA-encoded; IP literals in their canonical form."""
    name = host.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    prefix = "*." if name.startswith("*.") else ""
    rest = name[len(prefix) :]
    if rest and rest != "*":
        try:
            rest = rest.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise ValueError(f"{host!r} is not a valid host name") from exc
    return prefix + rest


def parse_network(value: str | IPNetwork) -> IPNetwork:
    """``10.0.0.0/8``, ``127.0.0.1`` (one address) or ``::1/128``; host bits must be zero."""
    if isinstance(value, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return value
    try:
        return ipaddress.ip_network(str(value).strip(), strict=True)
    except ValueError as exc:
        raise ValueError(
            f"{value!r} is not a network like 10.0.0.0/8 or 127.0.0.1 ({exc})"
        ) from exc


def _networks(value: Any) -> tuple[IPNetwork, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("must be a list of networks like [10.0.0.0/8, 127.0.0.1]")
    return tuple(parse_network(item) for item in value)


Networks = Annotated[
    tuple[IPNetwork, ...],
    BeforeValidator(_networks),
    WithJsonSchema({"type": "array", "items": {"type": "string"}, "examples": [["10.0.0.0/8"]]}),
]
"""Networks as declared (``10.0.0.0/8``, ``127.0.0.1``), checked by ``egress.parse_network``."""


def _embedded_ipv4(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64), else ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def _category(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address (None when it is)."""
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    for name, flag in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("unspecified", ip.is_unspecified),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if flag:
            return name
    return None if ip.is_global else "non-public"


def refusal(ip: IPAddress, policy: EgressPolicy) -> str | None:
    """The kind of address ``ip`` is when ``policy`` refuses it (e.g. "loopback"), else None."""
    inner = _embedded_ipv4(ip)
    category = _category(inner)  # an IPv6 wrapping an IPv4 reaches that IPv4
    if category is None:
        return None
    candidates = {ip, inner}
    if category == "cloud metadata":
        exact = [n for n in policy.networks if n.num_addresses == 1]
        return None if any(a in n for a in candidates for n in exact) else category
    return None if any(a in n for a in candidates for n in policy.networks) else category


def check_host(url: URL, policy: EgressPolicy) -> None:
    """Refuse a URL whose scheme or host the policy does not allow (no DNS yet)."""
    if url.scheme not in SCHEMES:
        raise EgressRefused(f"only http and https URLs may be requested, not {url.scheme or '?'}:")
    host = url.raw_host or ""
    if not host:
        raise EgressRefused("the URL has no host")
    try:
        permitted = policy.permits_host(host)
    except ValueError as exc:  # e.g. "a.example.com/../" filled into a host template
        raise EgressRefused(f"{host[:100]!r} is not a valid host name") from exc
    if not permitted:
        raise EgressRefused(
            f"host {host} is not in this tool's allowed hosts "
            f"({', '.join(sorted(policy.hosts)) or 'none'})"
        )


Lookup = Callable[[str, int], Awaitable[tuple[IPAddress, ...]]]
"""A resolver ``(name, port) -> addresses``: the system's by default; tests may inject one."""


async def resolve(
    host: str, port: int, policy: EgressPolicy, lookup: Lookup | None = None
) -> tuple[IPAddress, ...]:
    """The addresses of ``host``, each allowed by ``policy``; refuses if any one is not."""
    name = host[1:-1] if host.startswith("[") else host
    # A trailing dot names the same host: "169.254.169.254." is that address (curl and
    # browsers connect to it), and "localhost." is localhost (RFC 6761: so is any name under
    # it). Judged here, not left to whether the resolver knows the spelling.
    bare = name.rstrip(".").lower() or name
    try:
        addresses: tuple[IPAddress, ...] = (ipaddress.ip_address(bare),)
    except ValueError:
        local = bare == "localhost" or bare.endswith(".localhost")
        addresses = await (lookup or _lookup)("localhost" if local else name, port)
    for ip in addresses:
        check_address(name, ip, policy)
    return addresses


def check_address(name: str, ip: IPAddress, policy: EgressPolicy) -> None:
    """Refuse ``ip`` (an address of ``name``) unless ``policy`` allows it."""
    kind = refusal(ip, policy)
    if kind is not None:
        shown = name if name == str(ip) else f"{name} ({ip})"
        raise EgressRefused(
            f"refused to connect to {shown}: a {kind} address, which this tool does not "
            "allow (declare it in allow_networks to permit it)"
        )


async def _lookup(name: str, port: int) -> tuple[IPAddress, ...]:
    try:
        infos = await anyio.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        transient = isinstance(exc, socket.gaierror) and exc.errno == socket.EAI_AGAIN
        raise ExecutionError(
            f"cannot resolve host {name}: "
            f"{'temporary DNS failure' if transient else 'no such host'}",
            code="dns_failed",
            retryable=transient,
        ) from exc
    found = (ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos)
    return tuple(dict.fromkeys(found))


async def check_url(url: str, policy: EgressPolicy, lookup: Lookup | None = None) -> Destination:
    """Check scheme, host and every resolved address; connect only to ``addresses``."""
    from gateway.adapters.shared.urls import parse_url  # the declaration specs import this

    try:
        parsed = parse_url(url)
    except ValueError as exc:
        raise EgressRefused(f"not a valid URL ({exc})") from exc
    check_host(parsed, policy)
    host = parsed.raw_host or ""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return Destination(parsed, host, port, await resolve(host, port, policy, lookup))


class EgressDecl(Frozen):
    """Where a tool's requests may go beyond its own base URL (the ``egress:`` key of the
    http and browser adapters; checked after DNS, for every request)."""

    allow_hosts: tuple[str, ...] = ()
    """More hosts: ``api.example.com``, ``*.example.com`` (subdomains), ``*`` (any); for a
    browser tool, empty means any public host."""
    allow_networks: Networks = ()
    """Non-public networks allowed anyway, e.g. ``[10.20.0.0/16]``."""

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        EgressPolicy.build(value, ())  # raises ValueError naming a bad host
        return value
