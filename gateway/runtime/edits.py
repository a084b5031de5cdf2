"""Edit before approve: the approver changes arguments the declaration marks editable
(``approval: {editable: [...]}``) and approves the edited call.

The edited call is checked as the resumed call will be, before anything changes: resolved to
the approved version, normalised and validated against the tool's input schema, and decided
by the policy with ``approval.present: true`` (approved by this approver), state guards
included. Any refusal is a 422 (``argument_not_editable``, ``edit_refused``) and the approval
stays pending: the approver may edit again, approve unedited, or deny. An edit that passes is
applied with the decision in one transaction (``store.decide_approval(edit=...)``): the
approval binds the new arguments hash (a token too), the parked execution's request holds the
edited arguments, and the ``approval.edited`` event keeps both versions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway import jsontext
from gateway.declarations.model import ToolDeclaration
from gateway.errors import CallError, EditRefused, NotFound
from gateway.events.model import make_event
from gateway.pipeline import normalise, policy, resolve, validate
from gateway.pipeline.records import (
    Authorized,
    Call,
    Prepared,
    Requested,
    Settled,
    Ticket,
    ToolExecutionRequest,
    Trail,
)
from gateway.policy.inputs import recorded_input
from gateway.runtime.container import Runtime
from gateway.store.records import ApprovalEdit, ApprovalRecord, ExecutionRecord
from gateway.types import JSON

_ABSENT = object()


def editable_of(runtime: Runtime, approval: ApprovalRecord) -> tuple[str, ...]:
    """The arguments the approver may edit (none when the tool left the catalogue)."""
    tool = _tool(runtime, approval)
    return tool.approval.editable if tool is not None else ()


def changed_fields(approval: ApprovalRecord, edits: Mapping[str, JSON]) -> list[str]:
    """The arguments ``edits`` gives a value other than the approval's (sending one back
    unchanged is not an edit)."""
    return sorted(k for k, v in edits.items() if approval.arguments.get(k, _ABSENT) != v)


async def check_edit(
    runtime: Runtime, approval: ApprovalRecord, approver: str, edits: Mapping[str, JSON]
) -> ApprovalEdit | None:
    """The checked edit ``edits`` makes of ``approval``'s call, ready for the store; None when
    it changes nothing. Raises ``EditRefused`` (422) for a non-editable argument or an edited
    call that would not run; nothing has changed then."""
    changed = changed_fields(approval, edits)
    if not changed:
        return None
    editable = editable_of(runtime, approval)
    fixed = [name for name in changed if name not in editable]
    if fixed:
        allowed = ", ".join(editable) or "none"
        raise EditRefused(
            f"{approval.tool_name} does not let an approver change {', '.join(fixed)} "
            f"(editable arguments: {allowed}); nothing was decided",
            code="argument_not_editable",
            details={"arguments": fixed, "editable": list(editable)},
        )
    record = await runtime.store.get_execution(approval.execution_id)
    if record is None:
        raise NotFound(f"the execution of approval {approval.id} is gone")
    stored = ToolExecutionRequest.from_json(json.loads(record.request_json))
    request = replace(
        stored.with_arguments({**approval.arguments, **edits}),
        requested_version=approval.tool_version,
    )
    call = await _checked_call(runtime, record, request, approval, approver)
    if call.arguments_sha256 == approval.arguments_sha256:
        return None  # another spelling of the same call (``./a.txt`` for ``a.txt``)
    preview = await policy.preview_of(runtime, call)
    edited = dict(call.arguments)
    event = make_event(
        record.id,
        0,  # the store numbers it
        "approval.edited",
        {
            "approval_id": approval.id,
            "edited_by": approver,
            "changed": changed,
            "original": _version(runtime, approval.arguments, approval.arguments_sha256),
            "edited": _version(runtime, edited, call.arguments_sha256),
        },
    )
    return ApprovalEdit(
        arguments=edited,
        arguments_sha256=call.arguments_sha256,
        preview=preview,
        request_json=jsontext.compact(stored.with_arguments(edited).to_json()),
        event=event,
    )


def _tool(runtime: Runtime, approval: ApprovalRecord) -> ToolDeclaration | None:
    for tool in runtime.catalogue.versions(approval.tool_name):
        if str(tool.version) == approval.tool_version:
            return tool
    return None


def _version(runtime: Runtime, arguments: Mapping[str, Any], sha256: str) -> dict[str, Any]:
    """One version of the arguments as the event keeps it: bounded and masked like the input
    of ``policy.decided`` (``policy_input_mask``), with the hash of the whole."""
    shown, truncated = recorded_input({"arguments": dict(arguments)}, _mask(runtime))
    return {"arguments": shown["arguments"], "arguments_sha256": sha256, "truncated": truncated}


def _mask(runtime: Runtime) -> list[str]:
    return [p for p in runtime.settings.policy_input_mask if p.startswith("arguments.")]


async def _checked_call(
    runtime: Runtime,
    record: ExecutionRecord,
    request: ToolExecutionRequest,
    approval: ApprovalRecord,
    approver: str,
) -> Call:
    """The edited call through resolve, normalise, validate and policy, as the resumed call
    will go (nothing is written: the ticket is a dry run of the stored execution)."""
    ticket = Ticket(request, record.id, record.created_ms, stored=record, dry_run=True)
    try:
        resolved = await resolve.run(runtime, Requested(ticket, Trail(record.id, (), 0)))
        prepared = await normalise.run(runtime, resolved)
        call = prepared.call
        granted = replace(
            approval,
            status="approved",
            decided_by=approver,
            arguments=dict(call.arguments),
            arguments_sha256=call.arguments_sha256,
        )
        call = replace(call, ticket=replace(ticket, approval=granted))
        checked = await validate.run(runtime, Prepared(call, prepared.trail))
        decided = await policy.run(runtime, checked)
    except CallError as exc:
        raise _refused(exc) from exc
    if isinstance(decided, Settled) and decided.result.error is not None:
        raise _refused(decided.result.error)
    # Given an approval, the policy stage goes on or fails (approval_insufficient): it never
    # asks for another one.
    assert isinstance(decided, Authorized) and decided.awaiting is None
    return call


def _refused(error: Any) -> EditRefused:
    """The 422 for an edited call that would end ``failed``, with the error it would end with."""
    return EditRefused(
        f"the edited call would not run: {error.message}; nothing was decided",
        details={"error": error.to_json()},
    )
