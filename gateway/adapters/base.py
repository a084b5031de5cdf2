"""The adapter extension point: what every adapter receives and returns.

An adapter turns validated, normalised arguments into one real side effect (or a read) and
reports what happened; it translates its library's exceptions into ``gateway.errors`` at
its own edge. ``probe`` reads real state for state guards, verification and reconciliation.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import anyio
from pydantic import BaseModel, ConfigDict

from gateway.declarations.model import ToolDeclaration
from gateway.errors import ToolgateError
from gateway.types import JSON, Outcome
from gateway.workspace import ResolvedPath, Workspace


@dataclass(frozen=True, slots=True)
class Evidence:
    kind: str
    ref: str
    sha256: str | None = None
    data: Mapping[str, JSON] = field(default_factory=dict)

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"kind": self.kind, "ref": self.ref}
        if self.sha256 is not None:
            out["sha256"] = self.sha256
        out.update(self.data)
        return out


@dataclass(frozen=True, slots=True)
class SideEffectReport:
    attempted: bool
    committed: bool
    summary: str = ""

    def to_json(self) -> dict[str, JSON]:
        return {"attempted": self.attempted, "committed": self.committed, "summary": self.summary}


NO_SIDE_EFFECT = SideEffectReport(False, False)


@dataclass(frozen=True, slots=True)
class AdapterOutcome:
    """What the adapter observed. ``error`` explains a non-succeeded outcome."""

    outcome: Outcome
    data: JSON = None
    side_effect: SideEffectReport = NO_SIDE_EFFECT
    evidence: tuple[Evidence, ...] = ()
    error: ToolgateError | None = None
    truncated: bool = False


async def _no_checkpoint(state: Mapping[str, JSON]) -> None:
    return None


@dataclass(frozen=True, slots=True)
class AdapterCall:
    """Everything an adapter gets for one call, the same for every adapter."""

    execution_id: str
    tool: ToolDeclaration
    arguments: Mapping[str, JSON]
    workspace: Workspace
    paths: Mapping[str, ResolvedPath]
    deadline: float
    """Epoch seconds after which the call must stop."""
    cancelled: anyio.Event
    fencing_tokens: Mapping[str, int]
    output_budget: int
    context: Mapping[str, JSON]
    """The template context: arguments, workspace, actor, request, tool, execution."""
    emit_output: Callable[[str, str], None] = lambda stream, text: None
    """Stream a chunk of output (``stream`` is e.g. "stdout"); batched into tool.output."""
    checkpoint: Callable[[Mapping[str, JSON]], Awaitable[None]] = _no_checkpoint
    """Durably record adapter state that recovery needs (e.g. a pid and its start time)
    as a ``state.checkpointed`` event, before relying on it."""
    traceparent: str | None = None
    """W3C trace context to pass on to HTTP and browser requests."""

    def seconds_left(self) -> float:
        return self.deadline - time.time()


class Adapter(Protocol):
    """One kind of real system. Implementations live one per module in this package."""

    name: ClassVar[str]

    async def execute(self, call: AdapterCall) -> AdapterOutcome: ...

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON: ...

    async def aclose(self) -> None: ...


class NoOptions(BaseModel):
    """For adapters that take no declaration keys of their own."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """What the declaration loader checks a tool against, before any call."""

    name: str
    operations: Mapping[str, frozenset[str]]
    """Operation → the side_effect values a tool of that operation may declare."""
    probes: Mapping[str, frozenset[str]]
    """Probe name → required parameter names."""
    options: type[BaseModel] = NoOptions
    durable_reads: bool = False
    """True when even a read leaves something to clean up after a crash (a process):
    such reads are reserved like writes, so recovery can find them."""
    path_arguments: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Operation → path specs a tool of that operation must list in ``paths`` (key ``*``:
    every operation not listed)."""
