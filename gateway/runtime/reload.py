"""Hot reload: read toolgate.yaml, tools.d, rego/ and policies/ again, check everything,
swap atomically.

``Reloader.reload`` (``SIGHUP``, ``POST /v1/admin/reload``, docs/deploy.md#reload):

1. reads ``toolgate.yaml`` again and takes its reloadable keys (``settings.RELOADABLE``: the
   adapters' sections), naming every other key that changed (those need a restart); loads
   and checks the three sources as start-up does (``bootstrap.load_sources``, in a
   worker thread), opens the workspaces the policy data declares, builds the adapters whose
   tools changed (their ``create`` runs the adapters' own checks: connections, services,
   SQL) and the policy backend when the policy changed;
2. any fault refuses the reload (``ReloadRefused``, every fault listed and logged): what was
   built for it is closed, and the running generation is untouched;
3. otherwise swaps in a new generation of the runtime (``dataclasses.replace`` of the newest:
   the store, the signals, telemetry and the running set are shared): one reference replaced.
   Calls that started before keep the generation they leased; new ones lease the new one.

Nothing is rebuilt that did not change: the same catalogue revision keeps the catalogue (and
every adapter), the same policy revision keeps the policy backend (and its decision cache),
the same shadow (candidate) policy revision keeps the shadow (a new one switches it), and
an adapter kind whose declarations are all unchanged keeps its instance (a browser keeps its
sessions). What a retired generation alone held is closed once no call leases it any more
(``close_drained``, run by ``run`` whenever a lease ends).
"""

from __future__ import annotations

import logging
import signal
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import Any

import anyio

from gateway.adapters.base import Adapter
from gateway.adapters.registry import build_adapters, close_adapters
from gateway.declarations.catalogue import Catalogue
from gateway.errors import ConfigError, ReloadRefused
from gateway.policy.backends import open_backend
from gateway.policy.shadow import open_shadow
from gateway.runtime.bootstrap import (
    Closable,
    Loaded,
    held_parts,
    load_sources,
    observed,
    open_workspaces,
    revisions_of,
)
from gateway.runtime.container import Runtime
from gateway.settings import Settings, SettingsChange, reread, settings_change
from gateway.types import PolicyBackend, Revisions

log = logging.getLogger("toolgate.reload")


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload that was not refused did."""

    applied: bool
    """A new generation was swapped in (false: the files had not changed)."""
    revisions: Revisions
    previous: Revisions
    rebuilt: tuple[str, ...]
    """The adapter kinds that got a new instance."""
    settings_applied: tuple[str, ...]
    """Keys of toolgate.yaml that changed and were applied (``settings.RELOADABLE``)."""
    restart_needed: tuple[str, ...]
    """Keys of toolgate.yaml that changed and were not applied: they need a restart."""
    warnings: tuple[str, ...]
    generation: int
    seconds: float
    shadow: str | None = None
    """The shadow (candidate) policy's revision running now (None: no shadow configured)."""
    previous_shadow: str | None = None
    """The candidate's revision before the reload."""

    def to_json(self) -> dict[str, Any]:
        shadow = None
        if self.shadow is not None or self.previous_shadow is not None:
            shadow = {"revision": self.shadow, "previous": self.previous_shadow}
        return {
            "status": "applied" if self.applied else "unchanged",
            "revisions": self.revisions.to_json(),
            "previous": self.previous.to_json(),
            "shadow": shadow,
            "generation": self.generation,
            "adapters_rebuilt": list(self.rebuilt),
            "settings_applied": list(self.settings_applied),
            "restart_needed": list(self.restart_needed),
            "warnings": list(self.warnings),
            "seconds": round(self.seconds, 3),
        }


class Reloader:
    """Reloads one gateway process's runtime (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        if runtime.generations.current is None:
            runtime.generations.swap(runtime)  # a runtime built without open_runtime
        self._lock = anyio.Lock()
        self._asked = anyio.Event()
        self._released = anyio.Event()
        runtime.generations.on_release(self._on_release)
        self._signal_loop: Any = None

    # -- reloading --------------------------------------------------------------------------

    async def reload(self, by: str = "") -> Reloaded:
        """Reload now (one reload at a time); ReloadRefused lists the faults."""
        async with self._lock:
            started = time.perf_counter()
            try:
                # Once begun, a reload ends (swapped or refused, what it built closed): a
                # cancel midway would leave adapters and a policy backend open.
                with anyio.CancelScope(shield=True):
                    outcome = await self._reload(started)
            except ReloadRefused as exc:
                self._count("refused")
                log.warning(
                    "reload%s refused, the running set is kept (%s): %s",
                    f" by {by}" if by else "",
                    _shown(self.runtime.latest.revisions),
                    "; ".join(exc.problems),
                )
                raise
            self._count("applied" if outcome.applied else "unchanged")
            log.log(
                logging.WARNING if outcome.applied or outcome.restart_needed else logging.INFO,
                "reload%s %s: catalogue %s, policy %s%s%s%s%s",
                f" by {by}" if by else "",
                "applied" if outcome.applied else "found nothing changed",
                _change(outcome.previous.catalogue, outcome.revisions.catalogue),
                _change(outcome.previous.policy, outcome.revisions.policy),
                _shadow_change(outcome),
                f", adapters rebuilt: {', '.join(outcome.rebuilt)}" if outcome.rebuilt else "",
                _keys(", toolgate.yaml applied: ", outcome.settings_applied),
                _keys(
                    ", toolgate.yaml changed but NOT applied (restart needed): ",
                    outcome.restart_needed,
                ),
            )
            return outcome

    async def _reload(self, started: float) -> Reloaded:
        current = self.runtime.latest
        try:
            change = await anyio.to_thread.run_sync(_settings_change, current.settings)
            settings = change.settings
            loaded = await anyio.to_thread.run_sync(load_sources, settings)
            workspaces = open_workspaces(loaded.policy_data, settings.base_dir)
        except ConfigError as exc:
            raise ReloadRefused(exc.problems, current.revisions.to_json()) from exc
        revisions = revisions_of(loaded)
        warnings = tuple(loaded.sources.warnings)
        candidate = _shadow_revision(loaded)
        running_candidate = None if current.shadow is None else current.shadow.revision
        shadow_changed = candidate != running_candidate
        if revisions == current.revisions and not change.applied and not shadow_changed:
            number = self.runtime.generations.number
            seconds = time.perf_counter() - started
            return Reloaded(
                False,
                revisions,
                revisions,
                (),
                (),
                change.restart,
                warnings,
                number,
                seconds,
                shadow=candidate,
                previous_shadow=candidate,
            )
        catalogue = current.catalogue
        if revisions.catalogue != current.revisions.catalogue:
            catalogue = loaded.catalogue
        policy_changed = revisions.policy != current.revisions.policy
        async with AsyncExitStack() as built:  # closed unless swapped in: only what it built
            adapters, fresh = await self._adapters(current, catalogue, settings)
            built.push_async_callback(close_adapters, fresh)
            policy, shadow = current.policy, current.shadow
            try:
                if policy_changed:
                    policy = await self._policy(current, loaded)
                    built.push_async_callback(_close_all, [policy])
                if shadow_changed:
                    shadow = await open_shadow(
                        settings, loaded.shadow, current.store, current.telemetry
                    )
                    built.push_async_callback(_close_all, [] if shadow is None else [shadow])
            except ConfigError as exc:
                raise ReloadRefused(exc.problems, current.revisions.to_json()) from exc
            newer = replace(
                current,
                settings=settings,
                catalogue=catalogue,
                policy=policy,
                policy_data=loaded.policy_data if policy_changed else current.policy_data,
                workspaces=workspaces if policy_changed else current.workspaces,
                adapters=adapters,
                revisions=revisions,
                shadow=shadow,
            )
            self.runtime.generations.swap(newer)
            built.pop_all()  # the new generation holds them now
        self._on_release()  # the old one may have no lease at all: close it now
        return Reloaded(
            True,
            revisions,
            current.revisions,
            tuple(sorted(fresh)),
            change.applied,
            change.restart,
            warnings,
            self.runtime.generations.number,
            time.perf_counter() - started,
            shadow=candidate,
            previous_shadow=running_candidate,
        )

    async def _adapters(
        self, current: Runtime, catalogue: Catalogue, settings: Settings
    ) -> tuple[dict[str, Adapter], dict[str, Adapter]]:
        """Every adapter of the new generation, and those of them built new (the kinds whose
        tools or ``adapters.<kind>`` section changed). Each kind is built, so its checks run
        (a fault closes what was built: ``build_adapters``); an unchanged kind keeps its
        instance and the one just built is closed."""
        if catalogue is current.catalogue and settings.adapters == current.settings.adapters:
            return dict(current.adapters), {}
        try:
            built = await build_adapters(settings, catalogue)  # closed again if it raises
        except ConfigError as exc:
            raise ReloadRefused(exc.problems, current.revisions.to_json()) from exc
        adapters: dict[str, Adapter] = {}
        fresh: dict[str, Adapter] = {}
        spare: dict[str, Adapter] = {}
        for kind, adapter in built.items():
            old = current.adapters.get(kind)
            same = _tools(current.catalogue, kind) == _tools(catalogue, kind)
            if (
                old is not None
                and same
                and _section(current.settings, kind) == _section(settings, kind)
            ):
                adapters[kind], spare[kind] = old, adapter
            else:
                adapters[kind] = fresh[kind] = adapter
        await close_adapters(spare)
        return adapters, fresh

    async def _policy(self, current: Runtime, loaded: Loaded) -> PolicyBackend:
        return observed(
            await open_backend(current.settings, loaded.sources), current.telemetry.metrics
        )

    def _count(self, result: str) -> None:
        if (metrics := self.runtime.telemetry.metrics) is not None:
            metrics.reloaded(result)

    # -- closing what retired generations held ------------------------------------------------

    def _on_release(self) -> None:
        self._released.set()

    async def close_drained(self) -> int:
        """Close what only retired generations no call leases any more held; how many
        adapters and policy backends were closed."""
        generations = self.runtime.generations
        drained = generations.drained()
        if not drained:
            return 0
        parts = held_parts(drained, keep=generations.alive())
        with anyio.CancelScope(shield=True):  # forgotten already: close them whatever happens
            await _close_all(parts)
        return len(parts)

    # -- the process's task: SIGHUP and closing ---------------------------------------------

    def ask(self) -> None:
        """Ask for a reload (what ``SIGHUP`` does); ``run`` carries it out."""
        self._asked.set()

    def install_signal(self) -> bool:
        """Reload on ``SIGHUP`` (the main thread's event loop only); whether it was installed."""
        import asyncio

        try:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGHUP, self.ask)
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            return False  # not the main thread (a test client), or no signals here
        self._signal_loop = loop
        return True

    def remove_signal(self) -> None:
        if self._signal_loop is not None:
            self._signal_loop.remove_signal_handler(signal.SIGHUP)
            self._signal_loop = None

    async def run(self) -> None:
        """Carry out asked-for reloads and close drained generations, until cancelled."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._reloads)
            tasks.start_soon(self._closer)

    async def _reloads(self) -> None:
        while True:
            await self._asked.wait()
            self._asked = anyio.Event()
            try:
                await self.reload(by="SIGHUP")
            except ReloadRefused:
                pass  # logged, counted; the running set is kept
            except Exception:
                log.exception("the reload failed; the running set is kept")

    async def _closer(self) -> None:
        while True:
            await self._released.wait()
            self._released = anyio.Event()
            try:
                await self.close_drained()
            except Exception:
                log.exception("closing what a retired generation held failed")


def _settings_change(current: Settings) -> SettingsChange:
    return settings_change(current, reread(current))


def _section(settings: Settings, kind: str) -> Any:
    return settings.adapters.get(kind, {})


def _keys(label: str, keys: tuple[str, ...]) -> str:
    return f"{label}{', '.join(keys)}" if keys else ""


def _shadow_revision(loaded: Loaded) -> str | None:
    return None if loaded.shadow is None else loaded.shadow.revision()


def _tools(catalogue: Catalogue, kind: str) -> list[Any]:
    return [tool for tool in catalogue.all() if tool.adapter == kind]


async def _close_all(parts: Any) -> None:
    for part in list(parts):
        closable: Closable = part
        try:
            await closable.aclose()
        except Exception:
            log.exception("closing %s failed", type(part).__name__)


def _shown(revisions: Revisions) -> str:
    return f"catalogue {revisions.catalogue}, policy {revisions.policy}"


def _shadow_change(outcome: Reloaded) -> str:
    if outcome.shadow is None and outcome.previous_shadow is None:
        return ""
    return f", shadow policy {_change(str(outcome.previous_shadow), str(outcome.shadow))}"


def _change(before: str, after: str) -> str:
    return after if before == after else f"{before} -> {after}"
