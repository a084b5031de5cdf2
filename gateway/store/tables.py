"""SQLModel tables. Only ``gateway.store`` imports these; everyone else gets records."""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy import BigInteger, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

SCHEMA_VERSION = 7
"""1: the first schema. 2: events carry ``prev`` and ``hash`` (the audit trail's chain), and
``audit_checkpoints`` (``migrations.py`` upgrades a version 1 store in place). 3: approvals
keep their approver roles. 4: ``ended_sessions`` (a page session signed out ends on every
replica; an older gateway, which would not read it, refuses the store). 5:
``shadow_differences`` (what a shadow policy decided otherwise, read by every replica's
``toolgate policy shadow report``). 6: ``notifications``
(the outbox of approval notifications, written with the approval change it tells of). 7: the
indexes ``ix_executions_run`` and ``ix_executions_call`` (an approver's lookup by run or call,
and a run's events, read other principals' executions: ``uq_execution_call`` starts with the
principal and served none of them)."""


class ExecutionRow(SQLModel, table=True):
    __tablename__ = "executions"
    __table_args__ = (
        UniqueConstraint("principal", "run_id", "call_id", name="uq_execution_call"),
        Index("ix_executions_status", "status"),
        Index("ix_executions_quota", "principal", "workspace_id", "risk", "created_ms"),
        Index("ix_executions_run", "run_id", "call_id"),
        Index("ix_executions_call", "call_id"),
    )

    id: str = Field(primary_key=True, max_length=64)
    principal: str = Field(max_length=128)
    agent_id: str = Field(default="", max_length=128)
    run_id: str = Field(max_length=256)
    turn_id: str = Field(default="", max_length=256)
    call_id: str = Field(max_length=256)
    payload_sha256: str = Field(max_length=64)
    workspace_id: str = Field(max_length=128)
    tool_name: str = Field(max_length=128)
    tool_version: str | None = Field(default=None, max_length=64)
    risk: str | None = Field(default=None, max_length=16)
    """Set once the call passed validation; quotas count these."""
    status: str = Field(max_length=32)
    outcome: str | None = Field(default=None, max_length=32)
    arguments_sha256: str | None = Field(default=None, max_length=64)
    idempotency_scope: str | None = Field(default=None, max_length=64)
    approval_id: str | None = Field(default=None, max_length=64)
    cancellation_token: str | None = Field(default=None, max_length=256, index=True)
    request_json: str
    result_json: str | None = None
    fencing_json: str | None = None
    owner: str | None = Field(default=None, max_length=256)
    """The gateway process running it (host:pid:start); recovery checks it is gone."""
    created_ms: int = Field(sa_type=BigInteger)
    updated_ms: int = Field(sa_type=BigInteger)


class EventRow(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("execution_id", "seq", name="uq_event_seq"),)

    id: str = Field(primary_key=True, max_length=64)
    # No index of its own: uq_event_seq (execution_id, seq) serves lookups by execution.
    execution_id: str = Field(max_length=64)
    seq: int
    type: str = Field(max_length=64)
    version: int
    at_ms: int = Field(sa_type=BigInteger)
    data_json: str
    prev: str | None = Field(default=None, max_length=64)
    """The hash of the event before it in the execution (``gateway/events/chain.py``)."""
    hash: str | None = Field(default=None, max_length=64)
    """SHA-256 of this event's columns and ``prev``; never NULL once written by version 2."""


class AuditCheckpointRow(SQLModel, table=True):
    """A signed checkpoint of the audit trail: the heads of the chains that moved since
    about the previous one, linked to it (``gateway/audit/checkpoints.py``)."""

    __tablename__ = "audit_checkpoints"

    seq: int = Field(primary_key=True, sa_type=BigInteger)
    at_ms: int = Field(sa_type=BigInteger)
    prev: str = Field(max_length=64)
    """The digest of the checkpoint before it (seq - 1), or the genesis value."""
    heads_json: str
    """``[[execution_id, seq, hash], ...]``, sorted."""
    digest: str = Field(max_length=64)
    key_id: str = Field(max_length=64)
    signature: str = Field(max_length=256)
    writer: str = Field(default="", max_length=256)


class IdempotencyRow(SQLModel, table=True):
    __tablename__ = "idempotency"

    scope: str = Field(primary_key=True, max_length=64)
    execution_id: str = Field(max_length=64)
    arguments_sha256: str = Field(max_length=64)
    tool_version: str = Field(max_length=64)
    state: str = Field(max_length=16)
    expires_ms: int = Field(sa_type=BigInteger, index=True)


class LockRow(SQLModel, table=True):
    __tablename__ = "locks"

    key: str = Field(primary_key=True, max_length=512)
    holder: str = Field(primary_key=True, max_length=64)
    holder_call_id: str = Field(default="", max_length=256)
    mode: str = Field(max_length=16)
    token: int = Field(sa_type=BigInteger)
    lease_until_ms: int = Field(sa_type=BigInteger)


class LockFenceRow(SQLModel, table=True):
    __tablename__ = "lock_fences"

    key: str = Field(primary_key=True, max_length=512)
    last_token: int = Field(sa_type=BigInteger)


class ApprovalRow(SQLModel, table=True):
    __tablename__ = "approvals"

    id: str = Field(primary_key=True, max_length=64)
    execution_id: str = Field(max_length=64, index=True)
    status: str = Field(max_length=16, index=True)
    tool_name: str = Field(max_length=128)
    tool_version: str = Field(max_length=64)
    arguments_sha256: str = Field(max_length=64)
    principal: str = Field(max_length=128)
    workspace_id: str = Field(max_length=128)
    reasons_json: str
    arguments_json: str = "{}"
    preview_json: str = "null"
    requested_ms: int = Field(sa_type=BigInteger)
    expires_ms: int = Field(sa_type=BigInteger)
    decided_by: str | None = Field(default=None, max_length=128)
    decided_ms: int | None = Field(default=None, sa_type=BigInteger)
    comment: str | None = None
    approver_roles_json: str | None = None  # schema version 3


class SchemaVersionRow(SQLModel, table=True):
    __tablename__ = "schema_version"

    id: int = Field(primary_key=True)
    version: int


class RevokedKeyRow(SQLModel, table=True):
    """An API key refused by every replica from the moment this row commits
    (``toolgate keys revoke``; docs/security.md#revoking-a-key)."""

    __tablename__ = "revoked_keys"

    key_id: str = Field(primary_key=True, max_length=128)
    revoked_ms: int = Field(sa_type=BigInteger)
    revoked_by: str = Field(default="", max_length=128)
    reason: str = Field(default="")


class EndedSessionRow(SQLModel, table=True):
    """A page session signed out: refused by every replica from the moment this row commits,
    kept until the session would have expired (``store/sessions.py``)."""

    __tablename__ = "ended_sessions"

    session_id: str = Field(primary_key=True, max_length=64)
    ended_ms: int = Field(sa_type=BigInteger)
    expires_ms: int = Field(sa_type=BigInteger, index=True)


class NotificationRow(SQLModel, table=True):
    """One approval notification to one endpoint: written in the transaction that changed
    the approval, sent (and retried) by the workers of any replica (``store/outbox.py``)."""

    __tablename__ = "notifications"
    __table_args__ = (Index("ix_notifications_due", "status", "due_ms"),)

    id: str = Field(primary_key=True, max_length=64)
    """The ``webhook-id``: the same on every attempt (the receiver's replay protection)."""
    endpoint: str = Field(max_length=2048)
    """The endpoint's URL (``notifications.endpoints[].url``)."""
    event: str = Field(max_length=32)
    approval_id: str = Field(max_length=64, index=True)
    body: str
    """The exact bytes sent (UTF-8), signed anew at each attempt."""
    status: str = Field(max_length=16)
    """pending, delivered or dead."""
    attempts: int = 0
    created_ms: int = Field(sa_type=BigInteger)
    due_ms: int = Field(sa_type=BigInteger)
    """When it may be tried next; a claim moves it past the attempt's deadline."""
    claimed_by: str | None = Field(default=None, max_length=256)
    last_error: str | None = None


class ReplicaRow(SQLModel, table=True):
    """One gateway process and its lease: it renews ``lease_until_ms`` while it lives; once
    that is past, another replica takes over the executions it owns (docs/deploy.md)."""

    __tablename__ = "replicas"

    id: str = Field(primary_key=True, max_length=256)
    """The process's ``INSTANCE_ID``, the ``owner`` of the executions it runs."""
    node: str = Field(max_length=256)
    """Where its pids mean something (boot id and pid namespace)."""
    host: str = Field(max_length=256)
    pid: int = Field(sa_type=BigInteger)
    started_ms: int = Field(sa_type=BigInteger)
    heartbeat_ms: int = Field(sa_type=BigInteger)
    lease_until_ms: int = Field(sa_type=BigInteger, index=True)


class ShadowDifferenceRow(SQLModel, table=True):
    """A decision the shadow (candidate) policy made otherwise than the enforcing one
    (``store/shadow.py``; docs/policies.md#shadow-policies)."""

    __tablename__ = "shadow_differences"

    id: str = Field(primary_key=True, max_length=64)
    at_ms: int = Field(sa_type=BigInteger, index=True)
    kind: str = Field(max_length=64)
    """``<enforced>_to_<candidate>``: ``allow_to_deny``, ``deny_to_allow``, ..."""
    tool_name: str = Field(max_length=128)
    execution_id: str | None = Field(default=None, max_length=64)
    call_id: str = Field(max_length=256)
    enforced_revision: str = Field(max_length=128)
    candidate_revision: str = Field(max_length=128)
    enforced_json: str
    candidate_json: str


TABLES: tuple[sa.Table, ...] = tuple(
    cast(sa.Table, row.__table__)  # type: ignore[union-attr]
    for row in (
        ExecutionRow,
        EventRow,
        IdempotencyRow,
        LockRow,
        LockFenceRow,
        ApprovalRow,
        RevokedKeyRow,
        EndedSessionRow,
        NotificationRow,
        ReplicaRow,
        SchemaVersionRow,
        AuditCheckpointRow,
        ShadowDifferenceRow,
    )
)
"""Every table, in the order ``create_all`` is given them (``tests/store/schema.sql`` records
their DDL)."""
