"""Leaf module: enums, aliases and Protocols shared by every layer.

It imports nothing of the project, so anything may import it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

JSON = Any
"""A value that ``json.dumps`` accepts."""

OnStep = Callable[[int, int], None]
"""Called with (steps done, steps in all) after each step of a long operation: how the CLI
shows progress (``gateway/commands/progress.py``)."""


class Status(enum.StrEnum):
    QUEUED = "queued"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"


class ApprovalStatus(enum.StrEnum):
    """The statuses of an approval (docs/api.md lists them). Only a pending one can be
    decided; a decision on any other is refused with the code ``approval_<status>``."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    USED = "used"
    """approved, and spent by the call it was for"""
    WITHDRAWN = "withdrawn"
    """the call it was for was cancelled (or ended) before anyone decided"""


class Outcome(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PARTIAL = "partial"
    UNKNOWN = "unknown"
    CANCELLED = "cancelled"


class Phase(enum.StrEnum):
    RESOLVE = "resolve"
    VALIDATE = "validate"
    POLICY = "policy"
    EXECUTE = "execute"
    VERIFY = "verify"
    COMMIT = "commit"


class Risk(enum.StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class SideEffect(enum.StrEnum):
    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXTERNAL = "external"


class DecisionResult(enum.StrEnum):
    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    DENY = "deny"


class LockMode(enum.StrEnum):
    SHARED = "shared"
    EXCLUSIVE = "exclusive"


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy backend answered for one call."""

    result: DecisionResult
    reasons: tuple[str, ...] = ()
    extra: Mapping[str, JSON] = field(default_factory=dict)
    decision_id: str | None = None
    """The backend's id of this decision (OPA's ``decision_id``, as in its decision log)."""

    def to_json(self) -> dict[str, JSON]:
        return {"result": self.result.value, "reasons": list(self.reasons), **dict(self.extra)}


@dataclass(frozen=True, slots=True)
class Revisions:
    """What a gateway runs, as content digests: the same files give the same revisions on
    every replica (docs/deploy.md#reload)."""

    catalogue: str = ""
    """A digest of tools.d: each file's path below it and its bytes."""
    policy: str = ""
    """The revision of the policy bundle of rego/ and policies/ (its ``.manifest``'s)."""

    def to_json(self) -> dict[str, str]:
        return {"catalogue": self.catalogue, "policy": self.policy}


NO_REVISIONS = Revisions()
"""The revisions of a runtime built in code, from no files."""


@dataclass(frozen=True, slots=True)
class Listing:
    """What a policy backend answered to "could this principal ever be allowed to call this
    tool here?" (``data.toolgate.listed`` on a listing input document, docs/policies.md)."""

    listed: bool
    problem: str | None = None
    """Why the policy gave no usable answer (an evaluation error, undefined, not a boolean):
    then ``listed`` is False (fail closed) and the caller logs it."""


class PolicyBackend(Protocol):
    """Decides allow / require_approval / deny for a policy input document."""

    async def decide(self, document: Mapping[str, JSON]) -> Decision:
        """The decision on ``document``; a fault of the policy itself denies. A backend that
        asks a service raises ``gateway.errors.PolicyUnavailable`` when it gets no decision
        from it (nothing may run without one)."""
        ...

    async def listed(self, documents: Sequence[Mapping[str, JSON]]) -> list[Listing] | None:
        """The policy's listing rule on each listing input document (one listing: one answer
        per document, in order, all within one deadline of the backend's); None when the
        policy defines no such rule (the caller then asks ``decide`` about probe calls).
        Never raises."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class RemotePolicy(Protocol):
    """A policy backend that asks a service it can lose (OPA): ``/readyz`` asks it whether
    that service answers. A backend without this (the embedded one) is always available."""

    async def available(self) -> bool:
        """Whether the service answers decisions now; cheap, and bounded when it must ask."""
        ...


CacheObserver = Callable[[bool], None]
"""``hook(hit)``: called by a policy backend with a decision cache on each lookup."""


@runtime_checkable
class CachingPolicy(Protocol):
    """A policy backend that caches decisions and reports its lookups (the embedded one;
    any other backend with a cache implements this too, and the metrics see it)."""

    def observe_cache(self, hook: CacheObserver | None) -> None: ...
