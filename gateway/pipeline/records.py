"""Frozen records that flow through the stages, named for what they are."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gateway import jsontext
from gateway.adapters.base import AdapterOutcome, Evidence, SideEffectReport
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ToolgateError
from gateway.events.model import Event, make_event
from gateway.ids import sortable_id
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import JSON, Decision, Outcome
from gateway.workspace import ResolvedPath, Workspace

NOTHING_ATTEMPTED = SideEffectReport(False, False)


def canonical_json(value: Any) -> str:
    """The one canonical JSON form used for hashing (sorted keys, no spaces, UTF-8)."""
    return jsontext.canonical(value)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def new_execution_id() -> str:
    return sortable_id("ex")


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
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> ToolExecutionRequest:
        # ``traceparent`` is absent from a request stored before it was kept: it defaults
        return cls(**{name: data[name] for name in _REQUEST_FIELDS if name in data}, body=data)

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
    name for name in ToolExecutionRequest.__dataclass_fields__ if name != "body"
)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The stable result of one execution (docs/api.md#toolresult)."""

    call_id: str
    tool_version: str | None
    outcome: Outcome
    data: JSON = None
    error: ToolgateError | None = None
    side_effect: SideEffectReport = NOTHING_ATTEMPTED
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


@dataclass(frozen=True, slots=True)
class Flow:
    """The state of one call between stages; each stage returns a new Flow."""

    request: ToolExecutionRequest
    execution_id: str
    received_ms: int
    tool: ToolDeclaration | None = None
    workspace: Workspace | None = None
    arguments: Mapping[str, JSON] | None = None
    arguments_sha256: str | None = None
    paths: Mapping[str, ResolvedPath] = field(default_factory=dict)
    roles: tuple[str, ...] = ()
    decision: Decision | None = None
    awaiting: ApprovalRecord | None = None
    """A new approval to ask for (policy said require_approval)."""
    approval: ApprovalRecord | None = None
    """The approval this call runs under (resumed by the gateway, or an approval_token)."""
    record: ExecutionRecord | None = None
    """Set once the execution is durable in the store."""
    ephemeral: bool = False
    """A read with nothing to protect: no reservation; one insert at commit."""
    existing: ExecutionRecord | None = None
    """Set when the call resolves to an execution that already exists (replay)."""
    respond_async: bool = False
    """Park the call as ``queued`` once reserved; a worker runs the rest."""
    fencing: Mapping[str, int] = field(default_factory=dict)
    started_ms: int | None = None
    finished_ms: int | None = None
    raw: AdapterOutcome | None = None
    failure: ToolgateError | None = None
    result: ToolResult | None = None
    events: tuple[Event, ...] = ()
    """Events not yet durable."""
    seq: int = 0

    @classmethod
    def resume(cls, record: ExecutionRecord, approval: ApprovalRecord, next_seq: int) -> Flow:
        """The flow of a parked execution whose approval was granted."""
        request = ToolExecutionRequest.from_json(json.loads(record.request_json))
        request = replace(request, requested_version=approval.tool_version)
        flow = cls(request, record.id, record.created_ms, record=record, approval=approval)
        flow = flow.but(seq=next_seq)
        return flow.emit(
            "approval.resolved",
            approval_id=approval.id,
            status=approval.status,
            decided_by=approval.decided_by,
            comment=approval.comment,
        )

    @classmethod
    def dequeued(cls, record: ExecutionRecord, next_seq: int) -> Flow:
        """The flow of a queued execution a worker has claimed."""
        request = ToolExecutionRequest.from_json(json.loads(record.request_json))
        if record.tool_version is not None:
            request = replace(request, requested_version=record.tool_version)
        flow = cls(request, record.id, record.created_ms, record=record, seq=next_seq)
        return flow.emit("state.checkpointed", status="running", dequeued=True)

    @classmethod
    def start(cls, request: ToolExecutionRequest, respond_async: bool = False) -> Flow:
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
        return cls(
            request,
            execution_id,
            int(time.time() * 1000),
            respond_async=respond_async,
            events=(requested,),
            seq=1,
        )

    @property
    def finished(self) -> bool:
        return self.result is not None or self.existing is not None

    def emit(self, type_: str, **data: JSON) -> Flow:
        event = make_event(self.execution_id, self.seq, type_, data)
        return self.but(events=(*self.events, event), seq=self.seq + 1)

    def but_emit(self, changes: Mapping[str, Any], type_: str, **data: JSON) -> Flow:
        """``self.but(**changes).emit(type_, **data)`` in one copy."""
        event = make_event(self.execution_id, self.seq, type_, data)
        return _copy_flow(self, {**changes, "events": (*self.events, event), "seq": self.seq + 1})

    def drained(self) -> Flow:
        return self.but(events=())

    def but(self, **changes: Any) -> Flow:
        """A copy with ``changes`` (what ``dataclasses.replace`` does, for a quarter of its CPU:
        a call makes some twenty copies). An unknown field name raises AttributeError."""
        return _copy_flow(self, changes)


def _field_copier(cls: type) -> Any:
    """``copy(obj, changes)`` for a frozen, slotted dataclass without ``__post_init__``:
    one straight-line function (built like the dataclass's own ``__init__``) that copies
    each slot through its descriptor, then sets the changed ones; no ``__init__`` call, no
    per-field checks."""
    assert "__slots__" in cls.__dict__ and not hasattr(cls, "__post_init__")
    names = [f.name for f in fields(cls)]
    namespace: dict[str, Any] = {"_new": object.__new__, "_set": object.__setattr__, "_cls": cls}
    namespace.update({f"_set_{name}": cls.__dict__[name].__set__ for name in names})
    lines = ["def copy(obj, changes):", "    new = _new(_cls)"]
    lines += [f"    _set_{name}(new, obj.{name})" for name in names]
    lines += ["    for name, value in changes.items():", "        _set(new, name, value)"]
    lines += ["    return new"]
    exec("\n".join(lines), namespace)
    return namespace["copy"]


_copy_flow = _field_copier(Flow)
