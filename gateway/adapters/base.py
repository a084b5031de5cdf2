"""The adapter extension point: what every adapter receives and returns.

An adapter turns validated, normalised arguments into one real side effect (or a read) and
reports what happened; it translates its library's exceptions into ``gateway.errors`` at
its own edge. ``probe`` reads real state for state guards, verification and reconciliation.

What more an adapter can do is an optional capability, a ``runtime_checkable`` Protocol the
pipeline tests with ``isinstance``: ``Previewing`` (show the approver the effect),
``Recovering`` (stop what a crashed call left running); the options of a declaration may be
``Templating``. ``AdapterSpec`` (what the loader checks a declaration against) lives with
the loader, in ``gateway.declarations.spec``, and is importable from here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

import anyio

from gateway.declarations.model import ToolDeclaration
from gateway.declarations.spec import AdapterSpec, NoOptions, Templating
from gateway.errors import ToolgateError
from gateway.frozen import quick_init
from gateway.types import JSON, Outcome
from gateway.workspace import ResolvedPath, Workspace


@quick_init
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


@quick_init
@dataclass(frozen=True, slots=True)
class SideEffectReport:
    attempted: bool
    committed: bool
    summary: str = ""

    def to_json(self) -> dict[str, JSON]:
        return {"attempted": self.attempted, "committed": self.committed, "summary": self.summary}


NO_SIDE_EFFECT = SideEffectReport(False, False)
"""What an adapter reports when it says nothing of a side effect (and the default of a
result that has no report of one)."""
NOTHING_ATTEMPTED = SideEffectReport(False, False, "nothing was attempted")
"""A call that ended before its adapter was called (a refusal, a cancel before the start)."""


@quick_init
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


@quick_init
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


__all__ = [
    "NO_SIDE_EFFECT",
    "Adapter",
    "AdapterCall",
    "AdapterOutcome",
    "AdapterSpec",
    "Evidence",
    "Immediate",
    "NoOptions",
    "PolicyViewing",
    "Previewing",
    "Recovering",
    "SideEffectReport",
    "Templating",
]


class Adapter(Protocol):
    """One kind of real system: ``gateway/adapters/<kind>/`` (see ``registry``)."""

    name: ClassVar[str]

    async def execute(self, call: AdapterCall) -> AdapterOutcome: ...

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Previewing(Protocol):
    """An adapter that can show an approver what a call would do (e.g. a file's diff)."""

    async def preview(self, call: AdapterCall) -> JSON:
        """What the effect would be, without causing it; raises ToolgateError if it cannot tell."""
        ...


@runtime_checkable
class PolicyViewing(Protocol):
    """An adapter that can tell the policy what a call will do, rendered from the declaration
    and the call's template context (``input.action``, docs/policies.md#the-input-document):
    without sending anything, reading no secret and touching no file."""

    def policy_view(self, tool: ToolDeclaration, context: Mapping[str, JSON]) -> dict[str, JSON]:
        """The fields ``input.action`` carries besides ``kind``; raises ToolgateError when the
        declaration cannot be rendered for this call (the call could not run either)."""
        ...


@runtime_checkable
class Immediate(Protocol):
    """An adapter that can finish some calls at once, on the event loop: work small and
    bounded enough that a hop to a worker thread, the watchers and the cancel scope a call
    otherwise gets would cost more than the work (reading a small regular file)."""

    def execute_now(self, call: AdapterCall) -> AdapterOutcome | None:
        """The outcome of ``call`` when it can be had at once without blocking (bounded
        work, no waiting), else None: the pipeline then calls ``execute``, as usual. It
        raises what ``execute`` would (a ToolgateError for a failure)."""
        ...


@runtime_checkable
class Recovering(Protocol):
    """An adapter that can stop what a call left running when its gateway died."""

    async def recover(self, states: Sequence[Mapping[str, JSON]]) -> None:
        """Stop what ``state.checkpointed`` adapter states name (e.g. process trees): every
        state a recovery pass found for this adapter at once, so that they stop together."""
        ...
