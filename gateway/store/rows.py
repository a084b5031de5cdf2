"""Row mapping: the store's records to the tuples its statements bind, and rows back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any

from gateway import jsontext
from gateway.events.model import Event
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import Status

EXECUTION_COLUMNS = tuple(f.name for f in fields(ExecutionRecord))
EX_COLS = ", ".join(EXECUTION_COLUMNS)
APPROVAL_COLUMNS = (
    "id, execution_id, status, tool_name, tool_version, arguments_sha256, principal, "
    "workspace_id, reasons_json, arguments_json, preview_json, requested_ms, expires_ms, "
    "decided_by, decided_ms, comment"
)
EVENT_COLUMNS = "id, execution_id, seq, type, version, at_ms, data_json"
SELECT_EXECUTION = f"SELECT {EX_COLS} FROM executions"
SELECT_APPROVAL = f"SELECT {APPROVAL_COLUMNS} FROM approvals"

_STATUS_AT = EXECUTION_COLUMNS.index("status")
_EXECUTION_VALUES = attrgetter(*EXECUTION_COLUMNS)


def execution_row(record: ExecutionRecord) -> tuple[Any, ...]:
    row = list(_EXECUTION_VALUES(record))
    row[_STATUS_AT] = row[_STATUS_AT].value
    return tuple(row)


def execution(row: Sequence[Any]) -> ExecutionRecord:
    values = list(row)
    values[_STATUS_AT] = Status(values[_STATUS_AT])
    return ExecutionRecord(*values)


def event_row(event: Event, seq: int | str) -> tuple[Any, ...]:
    """An events row, ``seq`` given (an int) or counted by the statement (the execution id)."""
    data = jsontext.stored(event.data)
    return (event.id, event.execution_id, seq, event.type, event.version, event.at_ms, data)


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
    )


def approval(row: Sequence[Any]) -> ApprovalRecord:
    (id_, execution_id, status, tool_name, tool_version, arguments_sha256, principal,
     workspace_id, reasons_json, arguments_json, preview_json, requested_ms, expires_ms,
     decided_by, decided_ms, comment) = row  # fmt: skip
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
    )
