"""Row mapping: the store's records to the tuples its statements bind, and rows back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gateway import jsontext
from gateway.events.chain import chain
from gateway.events.model import Event
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import Status

EXECUTION_COLUMNS = ExecutionRecord._fields
EX_COLS = ", ".join(EXECUTION_COLUMNS)
APPROVAL_COLUMNS = (
    "id, execution_id, status, tool_name, tool_version, arguments_sha256, principal, "
    "workspace_id, reasons_json, arguments_json, preview_json, requested_ms, expires_ms, "
    "decided_by, decided_ms, comment, approver_roles_json"
)
EVENT_COLUMNS = "id, execution_id, seq, type, version, at_ms, data_json"
CHAINED_EVENT_COLUMNS = f"{EVENT_COLUMNS}, prev, hash"
"""An event's columns with its link in the audit chain (written on every insert)."""
SELECT_EXECUTION = f"SELECT {EX_COLS} FROM executions"
SELECT_APPROVAL = (
    f"SELECT {', '.join('a.' + c.strip() for c in APPROVAL_COLUMNS.split(','))}, "
    "e.run_id, e.call_id FROM approvals a LEFT JOIN executions e ON e.id = a.execution_id"
)
"""An approval with its call's run and call ids (kept on its execution: one copy); every
column of ``approvals`` as ``a.<column>``."""

_STATUS_AT = EXECUTION_COLUMNS.index("status")


def execution_row(record: ExecutionRecord) -> tuple[Any, ...]:
    row = list(record)
    row[_STATUS_AT] = record.status.value
    return tuple(row)


def execution(row: Sequence[Any]) -> ExecutionRecord:
    values = list(row)
    values[_STATUS_AT] = Status(values[_STATUS_AT])
    return ExecutionRecord._make(values)


stored_json = jsontext.stored
"""``jsontext.stored``: the text of every event's data and of a call's result."""


def chained_rows(events: Sequence[Event], seq: int, prev: str) -> list[tuple[Any, ...]]:
    """Rows of one execution's events (``events.insert`` appends one execution's at a time),
    numbered from ``seq``, each linked to the one before (the first to ``prev``) and hashed
    (``chain.chain``: the format is written there only)."""
    if not events:
        return []
    execution_id = events[0].execution_id
    rows = [
        (seq + i, e.id, e.type, e.version, e.at_ms, stored_json(e.data))
        for i, e in enumerate(events)
    ]
    digests = chain(prev, execution_id, rows)
    links = [prev, *digests]  # each row's prev: the digest of the row before it
    return [
        (eid, execution_id, s, type_, version, at_ms, data, links[i], digests[i])
        for i, (s, eid, type_, version, at_ms, data) in enumerate(rows)
    ]


def event(row: Sequence[Any]) -> Event:
    return Event(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]))


def approval_row(approval: ApprovalRecord) -> tuple[Any, ...]:
    return (
        approval.id,
        approval.execution_id,
        approval.status,
        approval.tool_name,
        approval.tool_version,
        approval.arguments_sha256,
        approval.principal,
        approval.workspace_id,
        json.dumps(list(approval.reasons)),
        json.dumps(approval.arguments, default=str),
        json.dumps(approval.preview, default=str),
        approval.requested_ms,
        approval.expires_ms,
        approval.decided_by,
        approval.decided_ms,
        approval.comment,
        None if approval.approver_roles is None else json.dumps(list(approval.approver_roles)),
    )


def approval(row: Sequence[Any]) -> ApprovalRecord:
    (id_, execution_id, status, tool_name, tool_version, arguments_sha256, principal,
     workspace_id, reasons_json, arguments_json, preview_json, requested_ms, expires_ms,
     decided_by, decided_ms, comment, approver_roles_json, run_id, call_id) = row  # fmt: skip
    return ApprovalRecord(
        id=id_,
        execution_id=execution_id,
        status=status,
        tool_name=tool_name,
        tool_version=tool_version,
        arguments_sha256=arguments_sha256,
        principal=principal,
        workspace_id=workspace_id,
        reasons=tuple(json.loads(reasons_json)),
        arguments=json.loads(arguments_json),
        preview=json.loads(preview_json),
        requested_ms=requested_ms,
        expires_ms=expires_ms,
        decided_by=decided_by,
        decided_ms=decided_ms,
        comment=comment,
        approver_roles=(
            None if approver_roles_json is None else tuple(json.loads(approver_roles_json))
        ),
        run_id=run_id,
        call_id=call_id,
    )
