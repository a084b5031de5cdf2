"""Frozen records the store hands out and takes in (never ORM objects)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from gateway.events.model import Event
from gateway.types import LockMode, Status


class ExecutionRecord(NamedTuple):
    """An execution as stored (its row). A named tuple, not a frozen dataclass: every call
    builds one, and a frozen dataclass sets each of its 23 fields through
    ``object.__setattr__`` (47k instructions against 19k); a copy with changes is
    ``record._replace(...)``."""

    id: str
    principal: str
    agent_id: str
    run_id: str
    turn_id: str
    call_id: str
    payload_sha256: str
    workspace_id: str
    tool_name: str
    tool_version: str | None
    risk: str | None
    status: Status
    outcome: str | None
    arguments_sha256: str | None
    idempotency_scope: str | None
    approval_id: str | None
    cancellation_token: str | None
    request_json: str
    result_json: str | None
    fencing_json: str | None
    owner: str | None
    created_ms: int
    updated_ms: int

    @property
    def result(self) -> dict[str, Any] | None:
        return json.loads(self.result_json) if self.result_json else None

    @property
    def terminal(self) -> bool:
        return self.status is Status.COMPLETED


class RunMember(NamedTuple):
    """An execution as a run's events list it: who owns it, its state and outcome, and the
    seq of its last event (None before any), without its request and result (a process's
    result holds up to its output budget: read for a hundred executions a page, it was most
    of the work)."""

    id: str
    principal: str
    status: Status
    outcome: str | None
    created_ms: int
    last_seq: int | None

    @property
    def terminal(self) -> bool:
        return self.status is Status.COMPLETED


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """A gateway process and its lease (the ``replicas`` table)."""

    id: str
    node: str
    host: str
    pid: int
    started_ms: int
    heartbeat_ms: int = 0
    lease_until_ms: int = 0

    def expired(self, now_ms: int) -> bool:
        return self.lease_until_ms < now_ms


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    """What the reservation stores under an idempotency key."""

    scope: str
    arguments_sha256: str
    tool_version: str
    expires_ms: int


@dataclass(frozen=True, slots=True)
class LockRequest:
    key: str
    mode: LockMode


@dataclass(frozen=True, slots=True)
class LockBusy:
    """A lock could not be taken now; ``holder_call_id`` says who has it.
    ``waiter_cancelled``: the execution that asked was cancelled meanwhile (it stops waiting)."""

    key: str
    holder: str
    holder_call_id: str
    waiter_cancelled: bool = False


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    id: str
    execution_id: str
    status: str
    tool_name: str
    tool_version: str
    arguments_sha256: str
    principal: str
    workspace_id: str
    reasons: tuple[str, ...]
    arguments: dict[str, Any]
    preview: Any
    requested_ms: int
    expires_ms: int
    decided_by: str | None = None
    decided_ms: int | None = None
    comment: str | None = None
    approver_roles: tuple[str, ...] | None = None
    """Who may decide, as the policy's decision named them (its ``approver_roles``); ``None``
    when the decision named none (or the approval predates schema version 3): then policy
    data's ``approvers`` for the tool's risk decide (``runtime/approvals.check_approver``)."""
    run_id: str | None = None
    call_id: str | None = None
    """The run and call of the parked execution (read with it: ``rows.SELECT_APPROVAL``), by
    which an agent that knows only its call finds the approval (docs/api.md)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "execution_id": self.execution_id,
            "run_id": self.run_id,
            "call_id": self.call_id,
            "status": self.status,
            "tool": {"name": self.tool_name, "version": self.tool_version},
            "arguments_sha256": self.arguments_sha256,
            "requested_by": self.principal,
            "workspace": self.workspace_id,
            "reasons": list(self.reasons),
            "arguments": self.arguments,
            "preview": self.preview,
            "requested_at_ms": self.requested_ms,
            "expires_at_ms": self.expires_ms,
            "decided_by": self.decided_by,
            "decided_at_ms": self.decided_ms,
            "comment": self.comment,
            "approver_roles": None if self.approver_roles is None else list(self.approver_roles),
        }


CallIdentity = tuple[str, str, str, str]
"""(principal, run_id, call_id, payload_sha256): what names one call, and what it asked."""


def call_identity(record: ExecutionRecord) -> CallIdentity:
    return (record.principal, record.run_id, record.call_id, record.payload_sha256)


class Reserved:
    """The reservation is durable; go on."""


class Existing:
    """The call (same run_id + call_id, or same idempotency key) already has an execution."""

    def __init__(self, record: ExecutionRecord, by: str, same_payload: bool) -> None:
        self.record, self.by, self.same_payload = record, by, same_payload


class ApprovalUnavailable:
    """The approval to consume is not (or no longer) approved: used, expired or denied."""


ReserveResult = Reserved | Existing | ApprovalUnavailable


@dataclass(frozen=True, slots=True)
class Decided:
    """The decision took effect: the approval as it now stands."""

    approval: ApprovalRecord


@dataclass(frozen=True, slots=True)
class Refused:
    """The approval could not be decided, and why: its status (``approved``, ``denied``,
    ``used``; ``expired`` for a pending one past its expiry; ``withdrawn`` when its call no
    longer waits for it), or ``not_found``."""

    status: str


ApprovalDecision = Decided | Refused


@dataclass(frozen=True, slots=True)
class ApprovalEdit:
    """Arguments an approver edited, approved with the decision in the same transaction: what
    the approval then binds, the parked execution's request to run them, and the
    ``approval.edited`` event that keeps both versions."""

    arguments: dict[str, Any]
    arguments_sha256: str
    preview: Any
    request_json: str
    event: Event
    """The ``approval.edited`` event."""


class ShadowDifference(NamedTuple):
    """A decision a shadow policy made otherwise than the enforcing one (the
    ``shadow_differences`` table; docs/policies.md#shadow-policies)."""

    id: str
    at_ms: int
    kind: str
    """``<enforced>_to_<candidate>`` of the two results: ``allow_to_deny``, ``deny_to_allow``,
    ``allow_to_require_approval``, ..."""
    tool_name: str
    execution_id: str | None
    call_id: str
    enforced_revision: str
    candidate_revision: str
    enforced_json: str
    """The enforcing decision (result, reasons, ...) as JSON."""
    candidate_json: str
