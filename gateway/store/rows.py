"""Row mapping: the store's records to the tuples its statements bind, and rows back."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring
from typing import Any

from gateway import jsontext
from gateway.events.chain import FORMAT_JSON, event_hash
from gateway.events.model import EVENT_TYPES, Event
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
SELECT_APPROVAL = f"SELECT {APPROVAL_COLUMNS} FROM approvals"

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


def chained_rows(events: Iterable[Event], seq: int, prev: str) -> list[tuple[Any, ...]]:
    """Events rows numbered from ``seq``, each linked to the one before (the first to
    ``prev``) and hashed (``gateway/events/chain.py``).

    The hashed array is written here as ``chain.encoding`` writes it (its fast path: the
    same text, checked by tests/store/test_rows.py), with the execution's id escaped once
    for all of its events, each type's JSON string made once (``_TYPE_JSON``), and each
    ``prev`` after the first a hex digest, a JSON string as it is; anything but plain ints
    and strs goes through ``event_hash``."""
    found: list[tuple[Any, ...]] = []
    data_json, q, sha256, types_json = stored_json, encode_basestring, hashlib.sha256, _TYPE_JSON
    xid: Any = None
    xid_json: str | None = None
    prev_json = q(prev) if type(prev) is str and type(seq) is int else None
    for eid, execution_id, _, type_, version, at_ms, value in events:
        data = data_json(value)
        if execution_id is not xid:
            xid = execution_id
            xid_json = q(xid) if type(xid) is str else None
        if (
            prev_json is not None
            and xid_json is not None
            and type(eid) is str
            and type(type_) is str
            and type(version) is int
            and type(at_ms) is int
            and type(seq) is int
        ):
            type_json = types_json.get(type_) or q(type_)
            text = (
                f"[{FORMAT_JSON},{prev_json},{xid_json},{seq},{q(eid)},{type_json},"
                f"{version},{at_ms},{q(data)}]"
            )
            digest = sha256(text.encode()).hexdigest()
        else:
            digest = event_hash(prev, xid, seq, eid, type_, version, at_ms, data)
        found.append((eid, xid, seq, type_, version, at_ms, data, prev, digest))
        prev, seq, prev_json = digest, seq + 1, f'"{digest}"'
    return found


_TYPE_JSON = {name: encode_basestring(name) for name in EVENT_TYPES}
"""Each event type as the JSON string the hashed array holds."""


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
     decided_by, decided_ms, comment, approver_roles_json) = row  # fmt: skip
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
    )
