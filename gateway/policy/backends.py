"""Choose and open the policy backend that ``policy_backend`` names (embedded or opa)."""

from __future__ import annotations

import logging

from gateway.errors import ConfigError
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources
from gateway.settings import Settings
from gateway.types import PolicyBackend

log = logging.getLogger("toolgate.policy")


def check_backend(settings: Settings) -> None:
    """What ``open_backend`` would refuse, found without opening anything (``toolgate
    check``, and ``serve`` before it starts): an ``opa_url`` that is not one."""
    if settings.policy_backend == "opa":
        from gateway.policy.opa import parse_url

        parse_url(settings.opa_url)


async def open_backend(settings: Settings, sources: PolicySources) -> PolicyBackend:
    """The backend, opened; the caller closes it (``aclose``).

    An OPA server that is not up yet does not stop the gateway (in a compose file it may
    start later): a warning now, every call refused (``policy_unavailable``) and ``/readyz``
    not ready until it answers.
    """
    if settings.policy_backend == "embedded":
        return EmbeddedPolicy(sources)
    if settings.policy_backend == "opa":
        from gateway.policy.opa import OpaPolicy

        backend = OpaPolicy(
            sources,
            settings.opa_url,
            timeout=settings.opa_timeout,
            cache_ttl=settings.opa_cache_ttl,
        )
        await backend.open()
        if not await backend.available():
            log.warning(
                "OPA at %s is not healthy yet: calls are refused until it is", settings.opa_url
            )
        return backend
    raise ConfigError(f"policy_backend {settings.policy_backend!r} is not one of embedded, opa")
