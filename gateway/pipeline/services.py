"""The long-lived parts a call runs against, built once per gateway process."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from gateway.adapters.base import Adapter
from gateway.declarations.catalogue import Catalogue
from gateway.errors import ConfigError
from gateway.faults import NO_FAULTS, Faults
from gateway.settings import Settings
from gateway.store.store import Store
from gateway.types import PolicyBackend
from gateway.workspace import Workspace


@dataclass(frozen=True)
class Services:
    settings: Settings
    catalogue: Catalogue
    policy: PolicyBackend
    policy_data: Mapping[str, Any]
    workspaces: Mapping[str, Workspace]
    store: Store
    adapters: Mapping[str, Adapter]
    approval_key: bytes = b""
    faults: Faults = NO_FAULTS
    cancellations: Cancellations = field(default_factory=lambda: Cancellations())
    queue_signal: Wakeup = field(default_factory=lambda: Wakeup())
    active: set[str] = field(default_factory=set)
    """Executions this process is running now (recovery leaves exactly these alone)."""

    def wake_workers(self) -> None:
        """Tell this process's workers a call was queued (other replicas poll)."""
        self.queue_signal.set()

    def roles(self, principal: str) -> tuple[str, ...]:
        actor = self.policy_data.get("actors", {}).get(principal) or {}
        return tuple(str(r) for r in actor.get("roles", ()) or ())


class Wakeup:
    """A resettable signal: ``wait`` returns when set (or after a timeout) and re-arms."""

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def set(self) -> None:
        if self._event is not None:
            self._event.set()

    async def wait(self, timeout: float) -> None:
        if self._event is None:
            self._event = anyio.Event()
        with anyio.move_on_after(timeout):
            await self._event.wait()
        if self._event.is_set():
            self._event = anyio.Event()


class Cancellations:
    """The cancel signals of the executions running in this process."""

    def __init__(self) -> None:
        self._events: dict[str, anyio.Event] = {}
        self._listeners: dict[str, Callable[[], None]] = {}

    def register(
        self, execution_id: str, on_signal: Callable[[], None] | None = None
    ) -> anyio.Event:
        """The execution's cancel signal; ``on_signal`` is called (on the event loop) when
        it is signalled."""
        event = self._events.setdefault(execution_id, anyio.Event())
        if on_signal is not None:
            self._listeners[execution_id] = on_signal
        return event

    def unregister(self, execution_id: str) -> None:
        self._events.pop(execution_id, None)
        self._listeners.pop(execution_id, None)

    def signal(self, execution_id: str) -> bool:
        """Tell a running execution to stop; False when it does not run here."""
        event = self._events.get(execution_id)
        if event is None:
            return False
        event.set()
        listener = self._listeners.get(execution_id)
        if listener is not None:
            listener()
        return True


def approval_key(settings: Settings) -> bytes:
    """The HMAC key of approval tokens: configured, or made once under var/."""
    if settings.approval_secret:
        return settings.approval_secret.encode("utf-8")
    path = settings.path(settings.var_dir) / "approval.key"
    if not path.exists():
        # Written aside and linked into place: two gateways starting at once agree on one key.
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".approval.key.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip().encode("utf-8")


def workspaces_from_policy(data: Mapping[str, Any], base_dir: Path) -> dict[str, Workspace]:
    """Workspaces declared in policy data, with roots resolved and created."""
    found: dict[str, Workspace] = {}
    declared = data.get("workspaces") or {}
    if not isinstance(declared, Mapping):
        raise ConfigError("policies: 'workspaces' must map workspace ids to {root: ...}")
    for ws_id, spec in declared.items():
        root = spec.get("root") if isinstance(spec, Mapping) else None
        if not isinstance(root, str) or not root:
            raise ConfigError(f"policies: workspace {ws_id!r} has no 'root'")
        path = Path(root)
        path = path if path.is_absolute() else base_dir / path
        path.mkdir(parents=True, exist_ok=True)
        found[str(ws_id)] = Workspace.declare(str(ws_id), path)
    return found
