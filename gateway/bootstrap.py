"""Build (and close) the long-lived services of one gateway process from its settings."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.adapters.registry import build_adapters
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.loader import load_catalogue
from gateway.errors import ConfigError
from gateway.faults import Faults
from gateway.pipeline.services import Services, approval_key, workspaces_from_policy
from gateway.policy.backends import open_backend
from gateway.policy.loader import PolicySources, load_policy_sources
from gateway.settings import Settings
from gateway.store.store import Store


@dataclass(frozen=True)
class Loaded:
    """Everything read from disk, checked, before anything is opened."""

    catalogue: Catalogue
    sources: PolicySources


def load_sources(settings: Settings) -> Loaded:
    """Load tools.d, rego/ and policies/; ConfigError lists every fault of all three."""
    problems: list[str] = []
    catalogue: Catalogue | None = None
    sources: PolicySources | None = None
    try:
        catalogue = load_catalogue(settings.path(settings.tools_dir))
    except ConfigError as exc:
        problems.extend(exc.problems)
    try:
        sources = load_policy_sources(
            settings.path(settings.rego_dir), settings.path(settings.policies_dir)
        )
    except ConfigError as exc:
        problems.extend(exc.problems)
    try:
        Faults.parse(settings.faults)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems or catalogue is None or sources is None:
        raise ConfigError(problems)
    return Loaded(catalogue, sources)


async def check_adapters(settings: Settings) -> None:
    """Build and close every adapter: their ``adapters.*`` sections and the tools that
    use them are checked now, with a clear error, rather than in the server's start-up."""
    adapters = build_adapters(settings)
    for adapter in adapters.values():
        await adapter.aclose()


async def open_services(settings: Settings) -> Services:
    """Load, check and open everything; the caller must ``close_services``."""
    loaded = load_sources(settings)
    workspaces = workspaces_from_policy(loaded.sources.data, settings.base_dir)
    store = Store(settings.resolved_database_url)
    await store.open()
    return Services(
        settings=settings,
        catalogue=loaded.catalogue,
        policy=await open_backend(settings, loaded.sources),
        policy_data=loaded.sources.data,
        workspaces=workspaces,
        store=store,
        adapters=build_adapters(settings),
        approval_key=approval_key(settings),
        faults=Faults.parse(settings.faults),
    )


async def close_services(services: Services) -> None:
    for adapter in services.adapters.values():
        await adapter.aclose()
    await services.policy.aclose()
    await services.store.aclose()
