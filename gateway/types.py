"""Leaf module: enums, aliases and Protocols shared by every layer.

It imports nothing of the project, so anything may import it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

JSON = Any
"""A value that ``json.dumps`` accepts."""


class Status(str, enum.Enum):
    QUEUED = "queued"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"


class Outcome(str, enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PARTIAL = "partial"
    UNKNOWN = "unknown"
    CANCELLED = "cancelled"


class Phase(str, enum.Enum):
    RESOLVE = "resolve"
    VALIDATE = "validate"
    POLICY = "policy"
    EXECUTE = "execute"
    VERIFY = "verify"
    COMMIT = "commit"


class Risk(str, enum.Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class SideEffect(str, enum.Enum):
    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXTERNAL = "external"


class DecisionResult(str, enum.Enum):
    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    DENY = "deny"


class LockMode(str, enum.Enum):
    SHARED = "shared"
    EXCLUSIVE = "exclusive"


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy backend answered for one call."""

    result: DecisionResult
    reasons: tuple[str, ...] = ()
    extra: Mapping[str, JSON] = field(default_factory=dict)

    def to_json(self) -> dict[str, JSON]:
        return {"result": self.result.value, "reasons": list(self.reasons), **dict(self.extra)}


class PolicyBackend(Protocol):
    """Decides allow / require_approval / deny for a policy input document."""

    async def decide(self, document: Mapping[str, JSON]) -> Decision: ...

    async def aclose(self) -> None: ...
