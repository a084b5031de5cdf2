"""What the health and metrics routes ask of the gateway: whether it can serve, and the
gauges read from the store at a scrape."""

from __future__ import annotations

from gateway.runtime.container import Runtime
from gateway.types import RemotePolicy


async def readiness(services: Runtime) -> tuple[bool, bool]:
    """Whether the store answers, and whether the policy backend can decide (the embedded
    engine always can; a remote one from its last answer or one bounded probe)."""
    store_ok = await services.store.ping()
    policy = services.policy
    policy_ok = not isinstance(policy, RemotePolicy) or await policy.available()
    return store_ok, policy_ok


async def gauges(services: Runtime) -> tuple[int, int]:
    """The pending approvals and the queued calls, as the store counts them now."""
    return await services.store.gauges()
