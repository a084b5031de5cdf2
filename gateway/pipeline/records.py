"""Frozen records that flow through the stages, named for what they are."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from gateway import jsonlimits, jsontext
from gateway.adapters.base import NO_SIDE_EFFECT, AdapterOutcome, Evidence, SideEffectReport
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ToolgateError
from gateway.events.model import Event, make_event
from gateway.frozen import quick_init
from gateway.ids import sortable_id
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import JSON, Outcome, Revisions
from gateway.workspace import ResolvedPath, Workspace


def canonical_json(value: Any) -> str:
    """The one canonical JSON form used for hashing (sorted keys, no spaces, UTF-8)."""
    return jsontext.canonical(value)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def new_execution_id() -> str:
    return sortable_id("ex")


@quick_init
@dataclass(frozen=True, slots=True)
class ToolExecutionRequest:
    """One agent request, parsed and authenticated (the caller is ``principal``)."""

    principal: str
    run_id: str
    turn_id: str
    call_id: str
    tool_name: str
    requested_version: str | None
    arguments: Mapping[str, JSON]
    agent_id: str
    workspace_id: str
    workspace_root: str | None
    deadline_ms: int | None
    cancellation_token: str | None
    idempotency_key: str | None
    approval_token: str | None
    expected_state: Mapping[str, JSON]
    body: Mapping[str, JSON]
    """The request as received (for resume and recovery)."""
    traceparent: str | None = None
    """W3C trace context of the execution (gateway/tracecontext.py); kept in request_json."""
    auth_method: str = ""
    """How the caller authenticated: ``api_key`` or ``jwt`` (empty: not over HTTP)."""
    roles: tuple[str, ...] = ()
    """The roles the caller's credential carried (a JWT's mapped claims). Both are kept in
    request_json so that a call resumed after approval or run by a worker has them."""
    arguments_bound: jsonlimits.Bound | None = field(default=None, compare=False)
    """Set by the door that checked ``arguments`` against the JSON limits, as part of its
    body: those limits and the body's shape (an upper bound of the arguments'), so that
    normalise need not walk them again. None for every other request: never stored (one
    rebuilt from request_json is checked), and ``with_arguments`` drops it."""

    def with_arguments(self, arguments: Mapping[str, JSON]) -> ToolExecutionRequest:
        """This request with other ``arguments`` (an approver's edits), which no door
        checked: normalise checks them."""
        return replace(self, arguments=arguments, arguments_bound=None)

    def to_json(self) -> dict[str, JSON]:
        """Everything needed to run this request again (resume, recovery); no body copy.
        The keys are ``_REQUEST_FIELDS``, in their order."""
        return {
            "principal": self.principal,
            "run_id": self.run_id,
            "turn_id": self.turn_id,
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "requested_version": self.requested_version,
            "arguments": dict(self.arguments),
            "agent_id": self.agent_id,
            "workspace_id": self.workspace_id,
            "workspace_root": self.workspace_root,
            "deadline_ms": self.deadline_ms,
            "cancellation_token": self.cancellation_token,
            "idempotency_key": self.idempotency_key,
            "approval_token": self.approval_token,
            "expected_state": dict(self.expected_state),
            "traceparent": self.traceparent,
            "auth_method": self.auth_method,
            "roles": list(self.roles),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> ToolExecutionRequest:
        # ``traceparent``, ``auth_method`` and ``roles`` are absent from a request stored
        # before they were kept: they default
        given = {name: data[name] for name in _REQUEST_FIELDS if name in data}
        roles = given.pop("roles", None)
        held = tuple(str(r) for r in roles) if isinstance(roles, list) else ()
        return cls(**given, roles=held, body=data)

    @property
    def payload_sha256(self) -> str:
        """What makes two requests 'the same call' (tokens excluded)."""
        return sha256_json(
            {
                "tool": [self.tool_name, self.requested_version],
                "arguments": self.arguments,
                "actor": [self.principal, self.agent_id],
                "workspace": self.workspace_id,
                "expected_state": self.expected_state,
                "idempotency_key": self.idempotency_key,
            }
        )


_REQUEST_FIELDS = tuple(
    f.name for f in fields(ToolExecutionRequest) if f.name not in ("body", "arguments_bound")
)


@quick_init
@dataclass(frozen=True, slots=True)
class ToolResult:
    """The stable result of one execution (docs/api.md#toolresult)."""

    call_id: str
    tool_version: str | None
    outcome: Outcome
    data: JSON = None
    error: ToolgateError | None = None
    side_effect: SideEffectReport = NO_SIDE_EFFECT
    evidence: tuple[Evidence, ...] = ()
    queued_ms: int = 0
    running_ms: int = 0
    truncated: bool = False

    def to_json(self) -> dict[str, JSON]:
        return {
            "call_id": self.call_id,
            "tool_version": self.tool_version,
            "outcome": self.outcome.value,
            "data": self.data,
            "error": self.error.to_json() if self.error else None,
            "side_effect": self.side_effect.to_json(),
            "evidence": [e.to_json() for e in self.evidence],
            "timing": {"queued_ms": self.queued_ms, "running_ms": self.running_ms},
            "truncated": self.truncated,
        }


@quick_init
@dataclass(frozen=True, slots=True)
class Trail:
    """The events of a call not yet durable, and the number of its next event."""

    execution_id: str
    events: tuple[Event, ...]
    seq: int

    def emit(self, type_: str, **data: JSON) -> Trail:
        event = make_event(self.execution_id, self.seq, type_, data)
        return Trail(self.execution_id, (*self.events, event), self.seq + 1)

    def drained(self) -> Trail:
        """The trail once its events are durable."""
        return Trail(self.execution_id, (), self.seq)


NO_LOCKS: Mapping[str, int] = MappingProxyType({})


@quick_init
@dataclass(frozen=True, slots=True)
class Ticket:
    """How a call entered the pipeline; fixed from the first stage to the last."""

    request: ToolExecutionRequest
    execution_id: str
    received_ms: int
    respond_async: bool = False
    """Park the call as ``queued`` once reserved; a worker runs the rest."""
    stored: ExecutionRecord | None = None
    """The execution this call continues (resumed after approval, or dequeued), as stored;
    ``None`` for a new call."""
    approval: ApprovalRecord | None = None
    """The approval a resumed call runs under."""
    dry_run: bool = False
    """A plan (``pipeline/plan.py``): only the stages marked ``plans`` run, nothing is
    written and no quota is counted."""


@quick_init
@dataclass(frozen=True, slots=True)
class Requested:
    """A call as asked for: stage ``resolve`` takes it."""

    ticket: Ticket
    trail: Trail

    @classmethod
    def start(
        cls, request: ToolExecutionRequest, respond_async: bool = False, dry_run: bool = False
    ) -> Requested:
        execution_id = new_execution_id()
        requested = make_event(
            execution_id,
            0,
            "tool.requested",
            {
                "run_id": request.run_id,
                "turn_id": request.turn_id,
                "call_id": request.call_id,
                "principal": request.principal,
                "agent_id": request.agent_id,
                "tool": request.tool_name,
                "requested_version": request.requested_version,
                "idempotency_key_present": bool(request.idempotency_key),
            },
        )
        ticket = Ticket(
            request, execution_id, int(time.time() * 1000), respond_async, dry_run=dry_run
        )
        return cls(ticket, Trail(execution_id, (requested,), 1))

    @classmethod
    def resume(cls, record: ExecutionRecord, approval: ApprovalRecord, next_seq: int) -> Requested:
        """A parked execution whose approval was granted."""
        request = ToolExecutionRequest.from_json(json.loads(record.request_json))
        request = replace(request, requested_version=approval.tool_version)
        ticket = Ticket(request, record.id, record.created_ms, stored=record, approval=approval)
        trail = Trail(record.id, (), next_seq).emit(
            "approval.resolved",
            approval_id=approval.id,
            status=approval.status,
            decided_by=approval.decided_by,
            comment=approval.comment,
        )
        return cls(ticket, trail)

    def stamped(self, revisions: Revisions) -> Requested:
        """The call with ``revisions`` in the data of its first event (``tool.requested``, or
        the event a resumed or dequeued leg begins with): what it runs on is on record."""
        if not self.trail.events or not (revisions.catalogue or revisions.policy):
            return self
        # the constructors, not dataclasses.replace (which looks the fields up on each call)
        trail, first = self.trail, self.trail.events[0]
        data = {**first.data, "revisions": revisions.to_json()}
        first = Event(
            first.id, first.execution_id, first.seq, first.type, first.version, first.at_ms, data
        )
        events = (first, *trail.events[1:])
        return Requested(self.ticket, Trail(trail.execution_id, events, trail.seq))

    @classmethod
    def dequeued(cls, record: ExecutionRecord, next_seq: int) -> Requested:
        """A queued execution a worker has claimed."""
        request = ToolExecutionRequest.from_json(json.loads(record.request_json))
        if record.tool_version is not None:
            request = replace(request, requested_version=record.tool_version)
        ticket = Ticket(request, record.id, record.created_ms, stored=record)
        trail = Trail(record.id, (), next_seq)
        return cls(ticket, trail.emit("state.checkpointed", status="running", dequeued=True))


@quick_init
@dataclass(frozen=True, slots=True)
class Resolved:
    """The exact tool version is known: stage ``normalise`` takes it."""

    ticket: Ticket
    tool: ToolDeclaration
    trail: Trail


@quick_init
@dataclass(frozen=True, slots=True)
class Call:
    """What the call is once normalised, fixed from then on: what templates, probes, the
    policy input and the adapter call are made of."""

    ticket: Ticket
    tool: ToolDeclaration
    workspace: Workspace
    arguments: Mapping[str, JSON]
    arguments_sha256: str
    paths: Mapping[str, ResolvedPath]
    roles: tuple[str, ...]
    templating: Mapping[str, Any] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    """The template context, made when first asked for (``pipeline.context.template_context``)
    and kept: the lock keys and the adapter call of one call render from the same one."""

    @property
    def request(self) -> ToolExecutionRequest:
        return self.ticket.request

    @property
    def execution_id(self) -> str:
        return self.ticket.execution_id


@quick_init
@dataclass(frozen=True, slots=True)
class Prepared:
    """Normalised (and, after stage ``validate``, checked): stage ``policy`` takes it."""

    call: Call
    trail: Trail


@quick_init
@dataclass(frozen=True, slots=True)
class Authorized:
    """The policy let the call go on: stage ``reserve`` takes it."""

    call: Call
    approval: ApprovalRecord | None
    """The approval this call runs under (resumed by the gateway, or an approval_token)."""
    awaiting: ApprovalRecord | None
    """A new approval to ask for (the policy said require_approval)."""
    trail: Trail


@quick_init
@dataclass(frozen=True, slots=True)
class Reserved:
    """Durable (or needing no reservation): stage ``lock`` takes it."""

    call: Call
    record: ExecutionRecord | None
    """The execution as reserved; ``None`` for an ephemeral read (one insert at commit)."""
    trail: Trail


@quick_init
@dataclass(frozen=True, slots=True)
class Locked:
    """Holding its locks: stage ``execute`` takes it."""

    call: Call
    record: ExecutionRecord | None
    fencing: Mapping[str, int]
    trail: Trail


@quick_init
@dataclass(frozen=True, slots=True)
class Started:
    """``tool.started`` is emitted: the adapter may be called (inside stage ``execute``)."""

    call: Call
    record: ExecutionRecord | None
    fencing: Mapping[str, int]
    started_ms: int
    trail: Trail


@quick_init
@dataclass(frozen=True, slots=True)
class Executed:
    """The adapter returned or failed: stage ``result`` takes it."""

    call: Call
    record: ExecutionRecord | None
    fencing: Mapping[str, int]
    started_ms: int
    finished_ms: int
    returned: AdapterOutcome | ToolgateError
    """The adapter's outcome, or its failure translated into the error tree."""
    trail: Trail


@quick_init
@dataclass(frozen=True, slots=True)
class Settled:
    """A result, not yet committed: stages ``verify`` and ``commit`` take it (a call that
    ends early, e.g. refused by the policy, becomes one at once)."""

    ticket: Ticket
    tool: ToolDeclaration | None
    arguments_sha256: str | None
    record: ExecutionRecord | None
    ephemeral: bool
    """A read reserved with nothing to protect: one insert at commit; counts against quotas."""
    fencing: Mapping[str, int]
    started_ms: int | None
    """Set once ``tool.started`` was emitted: past that, the side effect may have begun."""
    ran: Call | None
    """The call whose adapter returned an outcome (verify reads its effect back)."""
    result: ToolResult
    trail: Trail


@quick_init
@dataclass(frozen=True, slots=True)
class Ended:
    """The call resolved to an execution as the store holds it: nothing runs after this."""

    record: ExecutionRecord
    release_locks: bool = False
    """Locks this call holds are still to be released (its own result was not committed)."""


Working = Requested | Resolved | Prepared | Authorized | Reserved | Locked | Executed | Settled
"""A call on its way, in the record of the phase it is in."""
State = Working | Ended
