"""Which adapters exist: their specs (light, imported here) and their implementations
(imported only when ``build_adapters`` builds them).

To add an adapter kind ``NAME`` (docs/adapters/writing.md walks through it):

1. ``gateway/adapters/NAME/spec.py``: ``SPEC = AdapterSpec(name="NAME", ...)`` and its
   options model; it imports only pydantic and the gateway's leaf modules (``declarations``,
   ``errors``, ``types``, ``adapters.shared``), never the implementation or its library;
2. ``gateway/adapters/NAME/adapter.py``: ``create(settings, config, catalogue) -> Adapter``
   (``config`` is ``adapters.NAME`` of toolgate.yaml; ``catalogue`` the loaded tools.d);
3. one line in ``KINDS`` below.

Optional capabilities are Protocols in ``gateway.adapters.base`` (``PolicyViewing``, ``Previewing``,
``Recovering``); helpers any adapter may use are in ``gateway.adapters.shared``. No kind
imports another kind.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping

import anyio

from gateway.adapters.base import Adapter
from gateway.adapters.browser import spec as browser
from gateway.adapters.database import spec as database
from gateway.adapters.file import spec as file
from gateway.adapters.http import spec as http
from gateway.adapters.process import spec as process
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.spec import AdapterSpec
from gateway.errors import ConfigError
from gateway.settings import Settings

KINDS: Mapping[str, AdapterSpec] = {
    "file": file.SPEC,
    "process": process.SPEC,
    "browser": browser.SPEC,
    "database": database.SPEC,
    "http": http.SPEC,
}
"""Adapter kind → its spec; the implementation is ``gateway.adapters.<kind>.adapter``."""

SPECS: Mapping[str, AdapterSpec] = {spec.name: spec for spec in KINDS.values()}
"""What the declaration loader checks each tool against (``load_catalogue(dir, SPECS)``)."""
log = logging.getLogger("toolgate.adapters")


async def build_adapters(settings: Settings, catalogue: Catalogue) -> dict[str, Adapter]:
    """One live instance of every adapter, opened with the app (or a reload's generation) and
    closed with it; each is built from its ``adapters.<kind>`` section and the loaded
    catalogue (tools.d is not read again).

    Every kind is built, so that one ConfigError names the faults of all of them. When it is
    raised, or anything else is, the kinds built already are closed (``close_adapters``) and
    the error goes on as it was."""
    built: dict[str, Adapter] = {}
    try:
        problems = section_faults(settings)
        for kind in KINDS:
            try:
                built[kind] = build_adapter(settings, kind, catalogue)
            except ConfigError as exc:
                problems.extend(exc.problems)
        if problems:
            raise ConfigError(problems)
    except BaseException:
        await close_adapters(built)
        raise
    return built


async def close_adapters(adapters: Mapping[str, Adapter]) -> None:
    """Close ``adapters`` in the reverse order of building, each whatever the others do (a
    failure is logged) and even when the caller is being cancelled."""
    with anyio.CancelScope(shield=True):
        for kind, adapter in reversed(list(adapters.items())):
            try:
                await adapter.aclose()
            except Exception:
                log.exception("closing the %s adapter failed", kind)


def section_faults(settings: Settings) -> list[str]:
    """An ``adapters.<name>`` section for no adapter kind (start-up and reload refuse it)."""
    unknown = sorted(set(settings.adapters) - set(SPECS))
    if not unknown:
        return []
    return [f"adapters: unknown adapter sections {unknown} (known: {sorted(SPECS)})"]


def build_adapter(settings: Settings, kind: str, catalogue: Catalogue) -> Adapter:
    """The adapter of ``kind``, built from its ``adapters.<kind>`` section and ``catalogue``
    (its ``create`` checks the tools of that kind: a fault is a ConfigError)."""
    module = importlib.import_module(f"gateway.adapters.{kind}.adapter")
    adapter: Adapter = module.create(settings, settings.adapters.get(kind, {}), catalogue)
    return adapter
