"""Build (and close) the runtime of one gateway process from its settings."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gateway import __version__
from gateway.adapters.registry import SPECS, build_adapters, close_adapters
from gateway.audit.keys import load_signer
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.loader import load_catalogue
from gateway.errors import ConfigError
from gateway.faults import Faults
from gateway.instance import INSTANCE_ID
from gateway.keyfile import publish_once
from gateway.notifications.endpoints import always_refused, targets
from gateway.notifications.payload import Notifier
from gateway.notifications.sender import Sender
from gateway.observability.decisions import DecisionLog
from gateway.observability.metrics import Metrics
from gateway.observability.telemetry import Telemetry, tracing_wanted
from gateway.policy.backends import check_backend, open_backend
from gateway.policy.data import PolicyData
from gateway.policy.loader import PolicySources, load_policy_sources
from gateway.policy.shadow import load_shadow_sources, open_shadow
from gateway.runtime.container import Runtime
from gateway.settings import Settings, make_directory
from gateway.store.store import Store
from gateway.types import CachingPolicy, PolicyBackend, Revisions
from gateway.workspace import Workspace

log = logging.getLogger("toolgate.notifications")


class Closable(Protocol):
    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Loaded:
    """Everything read from disk, checked, before anything is opened."""

    catalogue: Catalogue
    sources: PolicySources
    policy_data: PolicyData
    """``sources.data`` as the gateway reads it."""
    shadow: PolicySources | None = None
    """The shadow (candidate) policy's sources, when ``shadow`` is configured."""


def load_sources(settings: Settings) -> Loaded:
    """Load tools.d, rego/ and policies/; ConfigError lists every fault of all three."""
    problems: list[str] = []
    catalogue: Catalogue | None = None
    sources: PolicySources | None = None
    policy_data: PolicyData | None = None
    shadow: PolicySources | None = None
    try:
        catalogue = load_catalogue(settings.path(settings.tools_dir), SPECS)
    except ConfigError as exc:
        problems.extend(exc.problems)
    try:
        sources = load_policy_sources(
            settings.path(settings.rego_dir), settings.path(settings.policies_dir)
        )
        policy_data = PolicyData.parse(sources.data, sources.lines)
    except ConfigError as exc:
        problems.extend(exc.problems)
    try:
        shadow = load_shadow_sources(settings)
    except ConfigError as exc:
        problems.extend(exc.problems)
    for check in (lambda: Faults.parse(settings.faults), lambda: check_backend(settings)):
        try:
            check()
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems or catalogue is None or sources is None or policy_data is None:
        raise ConfigError(problems)
    return Loaded(catalogue, sources, policy_data, shadow)


async def check_adapters(settings: Settings, catalogue: Catalogue) -> None:
    """Build and close every adapter: their ``adapters.*`` sections and the tools that
    use them are checked now, with a clear error, rather than in the server's start-up."""
    await close_adapters(await build_adapters(settings, catalogue))


async def open_runtime(settings: Settings, loaded: Loaded | None = None) -> Runtime:
    """Load (unless given what was loaded), check and open everything; the caller must
    ``close_runtime``.

    What only reads files comes first; then each part is opened after the parts it uses
    (the store, telemetry, the policy, the shadow, the adapters, the notifications' sender),
    and a start that fails at any step closes what it had opened, in the reverse order
    (``close_runtime``'s order)."""
    loaded = loaded or load_sources(settings)
    workspaces = open_workspaces(loaded.policy_data, settings.base_dir)
    key = approval_key(settings)
    signer = load_signer(settings) if settings.audit.checkpoint_interval > 0 else None
    async with AsyncExitStack() as opened:
        store = Store(settings.resolved_database_url)
        opened.push_async_callback(store.aclose)  # also what a failed open left
        await store.open()
        telemetry = make_telemetry(settings, store, revision=loaded.sources.revision())
        opened.callback(telemetry.close)
        policy = observed(await open_backend(settings, loaded.sources), telemetry.metrics)
        opened.push_async_callback(policy.aclose)
        shadow = await open_shadow(settings, loaded.shadow, store, telemetry)
        if shadow is not None:
            opened.push_async_callback(shadow.aclose)
        adapters = await build_adapters(settings, loaded.catalogue)
        opened.push_async_callback(close_adapters, adapters)
        notifications = open_notifications(settings, store, telemetry.metrics)
        if notifications is not None:
            opened.push_async_callback(notifications.aclose)
        runtime = Runtime(
            settings=settings,
            catalogue=loaded.catalogue,
            policy=policy,
            policy_data=loaded.policy_data,
            workspaces=workspaces,
            store=store,
            adapters=adapters,
            approval_key=key,
            faults=Faults.parse(settings.faults),
            telemetry=telemetry,
            revisions=revisions_of(loaded),
            shadow=shadow,
            notifications=notifications,
            audit_signer=signer,
        )
        opened.pop_all()  # the runtime holds them now: close_runtime closes them
    runtime.generations.swap(runtime)  # the first generation
    return runtime


def open_notifications(
    settings: Settings, store: Store, metrics: Metrics | None, env: Mapping[str, str] | None = None
) -> Sender | None:
    """The sender of approval notifications, with the store writing them in the transaction
    of each approval change (None, and nothing written, when no endpoint is configured)."""
    if not settings.notifications.endpoints:
        return None
    found, problems = targets(settings, os.environ if env is None else env)
    if problems:
        raise ConfigError(problems)
    for endpoint in settings.notifications.endpoints:
        why = always_refused(endpoint)
        if why:  # `toolgate check` refuses it; each delivery to it fails, logged
            log.warning("notification endpoint %s will never be reached: %s", endpoint.url, why)
    store.notify_with(Notifier(settings))
    return Sender(store, settings.notifications, found, metrics)


def revisions_of(loaded: Loaded) -> Revisions:
    """The catalogue and policy revisions of what was loaded."""
    return Revisions(loaded.catalogue.revision, loaded.sources.revision())


def make_telemetry(
    settings: Settings,
    store: Store,
    env: Mapping[str, str] | None = None,
    revision: str = "",
) -> Telemetry:
    """What ``settings`` (and, for tracing, the ``OTEL_*`` variables of ``env``) switch on,
    hooked to the store (a policy backend is hooked by ``observed``)."""
    env = os.environ if env is None else env
    tracing = None
    if tracing_wanted(settings.tracing.enabled, env):
        try:
            from gateway.observability.tracing import Tracing
        except ImportError as exc:
            raise ConfigError(
                "tracing is on but OpenTelemetry is not installed: pip install 'toolgate[tracing]'"
            ) from exc
        tracing = Tracing(env=env)
    metrics = None
    if settings.metrics.enabled:
        metrics = Metrics()
        store.observe(metrics.store_transaction)
        store.observe_batches(metrics.group_commit_size)
    decisions = None
    if settings.decision_log.enabled:
        config = settings.decision_log
        target = config.path if config.path == "-" else settings.path(Path(config.path))
        labels = {"id": INSTANCE_ID, "version": __version__, **config.labels}
        try:
            decisions = DecisionLog(target, revision, config.mask, labels)
        except OSError as exc:
            raise ConfigError(f"decision_log.path: cannot open {target}: {exc.strerror}") from exc
    return Telemetry(metrics=metrics, tracing=tracing, decisions=decisions)


def observed(policy: PolicyBackend, metrics: Metrics | None) -> PolicyBackend:
    """``policy``, its decision cache's lookups counted by ``metrics`` (when on)."""
    if metrics is not None and isinstance(policy, CachingPolicy):
        policy.observe_cache(metrics.policy_cache_lookup)
    return policy


async def close_runtime(runtime: Runtime) -> None:
    """Close what ``open_runtime`` opened, in the reverse order: the notifications' sender;
    the adapters, shadow and policy backend of the newest generation and of every retired
    one not closed yet (each once); telemetry; the store."""
    if runtime.notifications is not None:
        await runtime.notifications.aclose()
    for part in held_parts([*runtime.generations.retired(), runtime.latest]):
        await part.aclose()
    runtime.telemetry.close()
    await runtime.store.aclose()


def held_parts(generations: Sequence[Runtime], keep: Sequence[Runtime] = ()) -> list[Closable]:
    """The policy backends and adapters of ``generations`` that none of ``keep`` holds,
    each once."""
    kept = {id(part) for g in keep for part in _parts(g)}
    found: dict[int, Closable] = {}
    for generation in generations:
        for part in _parts(generation):
            if id(part) not in kept:
                found.setdefault(id(part), part)
    return list(found.values())


def _parts(runtime: Runtime) -> list[Closable]:
    """What ``runtime`` opened of its own, in the order to close it (the reverse of opening)."""
    shadow = [] if runtime.shadow is None else [runtime.shadow]
    return [*list(runtime.adapters.values())[::-1], *shadow, runtime.policy]


def open_workspaces(data: PolicyData, base_dir: Path) -> dict[str, Workspace]:
    """The workspaces of the policy data, with roots resolved (against ``base_dir``) and
    created, each carrying the data's ``protected_paths``; ConfigError names a root that
    cannot be created."""
    found: dict[str, Workspace] = {}
    for ws_id, spec in data.workspaces.items():
        path = Path(spec.root)
        path = path if path.is_absolute() else base_dir / path
        make_directory(path, f"workspaces.{ws_id}.root (policy data)")
        found[ws_id] = Workspace.declare(ws_id, path, data.protected_paths)
    return found


def approval_key(settings: Settings) -> bytes:
    """The HMAC key of approval tokens: configured, or made once under var/."""
    if settings.approval_secret:
        return settings.approval_secret.encode("utf-8")
    path = settings.path(settings.var_dir) / "approval.key"
    if not path.exists():  # two gateways starting at once agree on one key
        make_directory(path.parent, "var_dir")
        publish_once(path, secrets.token_hex(32).encode("ascii"))
    try:
        return path.read_text().strip().encode("utf-8")
    except OSError as exc:
        raise ConfigError(f"var_dir: cannot read the approval key {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"var_dir: the approval key {path} is not text") from exc
