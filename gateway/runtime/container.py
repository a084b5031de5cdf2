"""``Runtime``: the long-lived parts a gateway process runs on, built once
(``gateway.runtime.bootstrap``) and held by the doors and the workers.

Its fields never change once built; what changes while the process runs (the registry of
running executions, the cancel signals, the workers' wake-up) are objects of their own
(``gateway.runtime.signals``). The pipeline sees it as ``gateway.pipeline.services.Services``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.adapters.base import Adapter
from gateway.audit.keys import Signer
from gateway.declarations.catalogue import Catalogue
from gateway.faults import NO_FAULTS, Faults
from gateway.observability.telemetry import OFF, Telemetry
from gateway.policy.data import PolicyData
from gateway.runtime.signals import Cancellations, Running, Wakeup
from gateway.settings import Settings
from gateway.store.store import Store
from gateway.types import PolicyBackend
from gateway.workspace import Workspace


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    catalogue: Catalogue
    policy: PolicyBackend
    policy_data: PolicyData
    """The typed policy data the gateway reads (the Rego reads the raw data)."""
    workspaces: Mapping[str, Workspace]
    store: Store
    adapters: Mapping[str, Adapter]
    approval_key: bytes = b""
    faults: Faults = NO_FAULTS
    cancellations: Cancellations = field(default_factory=Cancellations)
    queue_signal: Wakeup = field(default_factory=Wakeup)
    active: Running = field(default_factory=Running)
    """Executions this process is running now (recovery leaves exactly these alone)."""
    telemetry: Telemetry = OFF
    """Metrics, tracing and the decision log, as configured (docs/operations.md)."""
    audit_signer: Signer | None = None
    """Signs the audit trail's periodic checkpoints (None: ``audit.checkpoint_interval`` 0)."""

    def wake_workers(self) -> None:
        """Tell this process's workers a call was queued (other replicas poll)."""
        self.queue_signal.set()

    def roles(self, principal: str) -> tuple[str, ...]:
        return self.policy_data.roles(principal)
