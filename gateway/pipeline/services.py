"""What the pipeline's stages see of the runtime: exactly the parts they use.

The concrete object is ``gateway.runtime.container.Runtime``, built once per gateway
process by ``gateway.runtime.bootstrap``; it satisfies these Protocols structurally, so a
stage's ``services.x`` is an attribute read (nothing is wrapped or copied per call).
The pipeline never imports the runtime: the runtime sits above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Protocol

import anyio

from gateway.adapters.base import Adapter
from gateway.declarations.catalogue import Catalogue
from gateway.faults import Faults
from gateway.observability.telemetry import Telemetry
from gateway.policy.data import PolicyData
from gateway.policy.shadow import Shadow
from gateway.settings import Settings
from gateway.store.store import Store
from gateway.types import PolicyBackend, Revisions
from gateway.workspace import Workspace


class CancelSignals(Protocol):
    """The cancel signals of the executions running in this process."""

    def register(
        self, execution_id: str, on_signal: Callable[[], None] | None = None
    ) -> anyio.Event: ...

    def unregister(self, execution_id: str) -> None: ...


class ActiveExecutions(Protocol):
    """The executions this process is running now (recovery leaves exactly these alone)."""

    def add(self, execution_id: str) -> None: ...

    def discard(self, execution_id: str) -> None: ...

    def __contains__(self, execution_id: object) -> bool: ...


class Services(Protocol):
    """The runtime as the stages use it (read-only attributes)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def catalogue(self) -> Catalogue: ...
    @property
    def policy(self) -> PolicyBackend: ...
    @property
    def policy_data(self) -> PolicyData: ...
    @property
    def workspaces(self) -> Mapping[str, Workspace]: ...
    @property
    def store(self) -> Store: ...
    @property
    def adapters(self) -> Mapping[str, Adapter]: ...
    @property
    def approval_key(self) -> bytes: ...
    @property
    def faults(self) -> Faults: ...
    @property
    def cancellations(self) -> CancelSignals: ...
    @property
    def active(self) -> ActiveExecutions: ...
    @property
    def telemetry(self) -> Telemetry: ...
    @property
    def revisions(self) -> Revisions: ...
    @property
    def shadow(self) -> Shadow | None: ...

    def lease(self) -> AbstractContextManager[Services]:
        """The newest generation of the runtime (a reload swaps in new ones), held until the
        block ends: a call runs on one catalogue, policy and set of adapters throughout."""

    def wake_workers(self) -> None:
        """Tell this process's workers a call was queued (other replicas poll)."""

    def roles(self, principal: str, held: tuple[str, ...] = ()) -> tuple[str, ...]:
        """``principal``'s roles in the policy data's ``actors``, then the roles its
        credential ``held`` (docs/security.md#roles-from-the-identity)."""
