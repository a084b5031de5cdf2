"""The configured endpoints, checked and ready to send to: each one's signing key (read from
the environment variable it names) and egress policy (its own host, and the networks it
allows, as a tool's ``allow_networks``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.adapters.shared.egress import EgressPolicy, normalise_host, refusal
from gateway.adapters.shared.urls import parse_url
from gateway.errors import ConfigError
from gateway.notifications.payload import check_template
from gateway.notifications.signing import parse_secret
from gateway.settings import NotificationEndpoint, Settings


@dataclass(frozen=True, slots=True)
class Target:
    """One endpoint as the sender uses it."""

    url: str
    key: bytes
    policy: EgressPolicy


def targets(settings: Settings, env: Mapping[str, str]) -> tuple[dict[str, Target], list[str]]:
    """Every endpoint by URL, and the faults of those that cannot be sent to (a secret
    missing or malformed, a template that is not JSON, a URL given twice)."""
    found: dict[str, Target] = {}
    problems: list[str] = []
    for n, endpoint in enumerate(settings.notifications.endpoints):
        where = f"notifications.endpoints[{n}]"
        if endpoint.url in found:
            problems.append(f"{where}.url: {endpoint.url} is given twice")
            continue
        if endpoint.template is not None:
            fault = check_template(f"{where}.template", endpoint.template)
            if fault:
                problems.append(fault)
        secret = env.get(endpoint.secret_env)
        if not secret:
            problems.append(f"{where}.secret_env: the variable {endpoint.secret_env} is not set")
            continue
        try:
            key = parse_secret(secret)
        except ValueError as exc:
            problems.append(f"{where}.secret_env: {endpoint.secret_env}: {exc}")
            continue
        found[endpoint.url] = Target(endpoint.url, key, policy_of(endpoint))
    return found, problems


def policy_of(endpoint: NotificationEndpoint) -> EgressPolicy:
    """What the endpoint may reach: its own host, on public addresses and its
    ``allow_networks``."""
    return EgressPolicy.build([parse_url(endpoint.url).host or ""], endpoint.allow_networks)


def always_refused(endpoint: NotificationEndpoint) -> str | None:
    """Why egress control refuses ``endpoint`` whatever DNS says (its host is an address,
    or ``localhost``, that it does not allow), or None."""
    host = normalise_host(parse_url(endpoint.url).host or "")
    names = ("127.0.0.1", "::1") if host == "localhost" or host.endswith(".localhost") else (host,)
    policy = policy_of(endpoint)
    for name in names:
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            return None  # a name: judged when it is resolved, at each delivery
        kind = refusal(ip, policy)
        if kind is not None:
            return (
                f"{endpoint.url} is a {kind} address, which egress control refuses "
                "(allow it in this endpoint's allow_networks)"
            )
    return None


def check_startup(settings: Settings, env: Mapping[str, str]) -> None:
    """ConfigError naming every endpoint that cannot be sent to (``serve`` checks this
    before it binds its socket, as it checks the adapters)."""
    problems = targets(settings, env)[1]
    if problems:
        raise ConfigError(problems)


def check(settings: Settings, env: Mapping[str, str]) -> list[str]:
    """Every fault of the notification endpoints, for ``toolgate check``: those ``targets``
    finds, and URLs egress control would always refuse."""
    problems = targets(settings, env)[1]
    for n, endpoint in enumerate(settings.notifications.endpoints):
        why = always_refused(endpoint)
        if why:
            problems.append(f"notifications.endpoints[{n}].url: {why}")
    return problems
