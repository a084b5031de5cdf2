"""Which adapters exist, and what the declaration loader checks a tool against.

To add an adapter: a module in this package with ``SPEC`` (an ``AdapterSpec``) and
``create(settings, config) -> Adapter``, registered in ``_MODULES`` below.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

from gateway.adapters import browser, database, file, http, process
from gateway.adapters.base import Adapter, AdapterSpec
from gateway.errors import ConfigError
from gateway.settings import Settings

_MODULES: tuple[ModuleType, ...] = (file, process, browser, database, http)

SPECS: Mapping[str, AdapterSpec] = {module.SPEC.name: module.SPEC for module in _MODULES}


def build_adapters(settings: Settings) -> dict[str, Adapter]:
    """One live instance of every adapter, opened with the app and closed with it."""
    unknown = sorted(set(settings.adapters) - set(SPECS))
    if unknown:
        raise ConfigError(f"adapters: unknown adapter sections {unknown} (known: {sorted(SPECS)})")
    return {
        module.SPEC.name: module.create(settings, settings.adapters.get(module.SPEC.name, {}))
        for module in _MODULES
    }
