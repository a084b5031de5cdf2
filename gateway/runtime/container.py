"""``Runtime``: the long-lived parts a gateway process runs on, built once
(``gateway.runtime.bootstrap``) and held by the doors and the workers.

Its fields never change once built; what changes while the process runs (the registry of
running executions, the cancel signals, the workers' wake-up) are objects of their own
(``gateway.runtime.signals``). The pipeline sees it as ``gateway.pipeline.services.Services``.

A reload (``gateway.runtime.reload``) builds a new generation: a copy with a new catalogue,
policy, policy data, workspaces and the adapters whose tools changed, sharing everything
else, and swaps it in (``generations``, shared by every generation). ``latest`` is the newest;
``lease()`` holds the newest for as long as a call runs on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from gateway.adapters.base import Adapter
from gateway.audit.keys import Signer
from gateway.declarations.catalogue import Catalogue
from gateway.faults import NO_FAULTS, Faults
from gateway.notifications.sender import Sender
from gateway.observability.telemetry import OFF, Telemetry
from gateway.policy.data import PolicyData
from gateway.policy.shadow import Shadow
from gateway.runtime.admission import Admission
from gateway.runtime.signals import Cancellations, Generations, Running, Wakeup
from gateway.settings import Settings
from gateway.store.store import Store
from gateway.types import NO_REVISIONS, PolicyBackend, Revisions
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
    revisions: Revisions = NO_REVISIONS
    """What this generation runs: the catalogue and policy revisions (docs/deploy.md#reload)."""
    shadow: Shadow | None = None
    """The shadow (candidate) policy, decided beside ``policy`` and never enforced
    (docs/policies.md#shadow-policies); None when none is configured."""
    notifications: Sender | None = None
    """Sends the approval notifications of the outbox (None: no endpoint configured)."""
    generations: Generations[Runtime] = field(default_factory=Generations)
    """The newest generation and the leases on older ones (shared by every generation)."""
    admission: Admission = None  # type: ignore[assignment]  # made in __post_init__
    """What each principal, and everyone, holds now against the bounds on load (made from
    ``settings``; docs/security.md#bounded-load): one for every generation, as the store."""

    @property
    def latest(self) -> Runtime:
        """The newest generation (this one until a reload swaps in another)."""
        return self.generations.current or self

    def lease(self) -> AbstractContextManager[Runtime]:
        """The newest generation, held (its adapters and policy stay open) until the block
        ends; a copy that is no generation (``dataclasses.replace`` in a test) gets itself."""
        return self.generations.lease(self)

    def __post_init__(self) -> None:
        if self.admission is None:  # a reload's new generation (dataclasses.replace) keeps it
            object.__setattr__(self, "admission", Admission(self.settings, self.telemetry.metrics))
        if self.telemetry.metrics is not None:  # each generation's tools may label series
            self.telemetry.metrics.declare_tools(self.catalogue.names)

    def wake_workers(self) -> None:
        """Tell this process's workers a call was queued (other replicas poll)."""
        self.queue_signal.set()

    def roles(self, principal: str, held: tuple[str, ...] = ()) -> tuple[str, ...]:
        """``principal``'s roles in the policy data, then those its credential ``held``
        (a JWT's mapped claims), each once."""
        data = self.policy_data.roles(principal)
        return tuple(dict.fromkeys((*data, *held))) if held else data
