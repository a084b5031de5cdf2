"""Approvals asked through the MCP protocol itself (docs/mcp.md#approvals-through-the-protocol).

A ``tools/call`` that parks awaiting approval, from a client that declared URL mode
elicitation (``capabilities.elicitation.url``), is answered by putting the question in front
of the person: a message with the approval's reasons and a summary of the exact arguments,
and the URL of the approval page (``/ui/approvals/{id}``). The requester may see that page
(one rule of visibility, ``service.approvals.may_see``): it is where they decide when they
may (``service.approvals.may_decide``), else their view of the pending call, which names
who must decide; the message says which.

- 2025-11-25: an ``elicitation/create`` request with ``mode: "url"`` on the call's own
  stream, answered within ``RESPONSE_WAIT_S``; then the execution is read again.
- 2026-07-28: an ``input_required`` result embedding the same elicitation and a
  ``requestState`` (``seal``: HMAC with a key derived from the approval key, bound to the
  principal, the execution and the tool, with an expiry); the client retries the same call
  with its ``inputResponses`` and the state, which ``resume`` verifies before it reads
  anything (never trusted blindly: a forged, expired or another principal's state is an
  invalid-params error and nothing runs).

The client's answer is never a decision: "accept" only says the person went to the page.
Only a principal allowed to decide decides, on the gateway. After an "accept" the call
waits at most ``RESULT_WAIT_S`` for its end and answers the result; otherwise (still
pending, "decline", "cancel", no answer) today's pending answer, saying the approval is
still open and how to follow it. A request is never held for the approval's lifetime.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway import b64url
from gateway.errors import LimitExceeded
from gateway.mcp import results
from gateway.mcp.context import Door
from gateway.notifications.payload import Notifier
from gateway.observability.logs import SECRETS
from gateway.service import approvals, executions
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import ApprovalStatus, Status

log = logging.getLogger("toolgate.mcp")

INPUT_KEY = "toolgate.approval"
"""The key of the elicitation in an ``input_required`` result's ``inputRequests``."""
RESPONSE_WAIT_S = executions.MAX_WAIT_S
"""2025-11-25: how long the call waits for the client's answer to ``elicitation/create``."""
RESULT_WAIT_S = 10.0
"""After an "accept": how long the call waits for the execution's end before it answers
that the approval is still pending."""
STATE_GRACE_MS = 10 * 60 * 1000
"""A ``requestState`` outlives its approval's expiry by this (the retry then reports it)."""
_STATE_VERSION = 1


def declares_url_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    caps = ctx.session.client_capabilities
    return caps is not None and caps.elicitation is not None and caps.elicitation.url is not None


def declared(caps: Mapping[str, Any]) -> bool:
    """Whether raw client capabilities (2026-07-28's ``_meta``) declare URL elicitation:
    gateway/mcp/stateless.py then leaves the call to the SDK's path, which asks."""
    found = caps.get("elicitation")
    return isinstance(found, Mapping) and found.get("url") is not None


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def ask(
    door: Door, ctx: ServerRequestContext[Any, Any], record: ExecutionRecord | None
) -> dict[str, Any] | None:
    """The answer to a call whose execution ``record`` parked awaiting a pending approval,
    for a client that declared URL elicitation; None for any other (answered as today)."""
    if record is None or record.status is not Status.AWAITING_APPROVAL:
        return None
    if not declares_url_elicitation(ctx):
        return None
    approval = await executions.approval_of(door.services, record)
    if approval is None or approval.status != ApprovalStatus.PENDING:
        return None
    message, url = question(door, approval)
    if _modern(ctx):
        return {
            "resultType": "input_required",
            "inputRequests": {
                INPUT_KEY: {
                    "method": "elicitation/create",
                    "params": {"mode": "url", "message": message, "url": url},
                }
            },
            "requestState": seal(door, record, approval),
        }
    action: str | None = None
    try:
        with anyio.fail_after(RESPONSE_WAIT_S):
            answer = await ctx.session.elicit_url(
                message, url, elicitation_id=approval.id, related_request_id=ctx.request_id
            )
        action = answer.action
    except TimeoutError:
        log.info("no answer to the elicitation of approval %s", approval.id)
    except Exception as exc:  # no back channel, an error answer, a malformed one
        log.info("the elicitation of approval %s failed: %s", approval.id, type(exc).__name__)
    return await _continued(door, record, action)


def question(door: Door, approval: ApprovalRecord) -> tuple[str, str]:
    """What the person is asked, and the page it brings them to."""
    services = door.services
    url = results.approval_page(door.base_url, approval.id)
    reasons = "; ".join(approval.reasons) or "the policy asks for it"
    shown = Notifier(services.settings).arguments(approval.arguments)
    arguments = json.dumps(shown, separators=(",", ":"), default=str, ensure_ascii=False)
    why_not = approvals.may_decide(services, approval, door.principal)
    if why_not is None:
        who = "You may decide it on the page: approve or deny it there."
    else:
        who = (
            f"You may not decide it yourself ({why_not}); the page shows the pending call "
            "and who must decide it."
        )
    text = (
        f"Toolgate: the call of {approval.tool_name} (version {approval.tool_version}) "
        f"awaits approval {approval.id}: {reasons}. Its exact arguments (sha256 "
        f"{approval.arguments_sha256}): {arguments}. {who} Answering here approves nothing."
    )
    return SECRETS.mask(text), url


# -- requestState (2026-07-28) ---------------------------------------------------------------


def _state_key(door: Door) -> bytes:
    """Derived from (never equal to) the approval key, as the UI's session key is."""
    return hmac.new(
        door.services.approval_key, b"toolgate mcp request state v1", hashlib.sha256
    ).digest()


def seal(door: Door, record: ExecutionRecord, approval: ApprovalRecord) -> str:
    claims = {
        "v": _STATE_VERSION,
        "principal": door.principal,
        "execution": record.id,
        "tool": record.tool_name,
        "expires_ms": approval.expires_ms + STATE_GRACE_MS,
    }
    payload = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()
    mac = hmac.new(_state_key(door), payload, hashlib.sha256).digest()
    return f"{b64url.encode(payload)}.{b64url.encode(mac)}"


def _refused(why: str) -> MCPError:
    return MCPError(
        code=INVALID_PARAMS,
        message=f"requestState refused: {why}; nothing was run",
        data={"type": "invalid_request_state"},
    )


def unseal(door: Door, state: Any, tool: str) -> str:
    """The execution id an authentic, unexpired ``state`` names for this principal and
    ``tool``; an invalid-params error otherwise."""
    if not isinstance(state, str) or not state.isascii():
        raise _refused("it is not a state this gateway issued")
    try:
        payload_text, mac_text = state.split(".", 1)
        payload, mac = b64url.decode(payload_text), b64url.decode(mac_text)
    except ValueError:
        raise _refused("it is not a state this gateway issued") from None
    expected = hmac.new(_state_key(door), payload, hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        raise _refused("its signature does not match")
    try:
        claims = json.loads(payload)
    except (ValueError, RecursionError):
        raise _refused("its payload is malformed") from None
    if (
        not isinstance(claims, dict)
        or claims.get("v") != _STATE_VERSION
        or not isinstance(claims.get("execution"), str)
        or type(claims.get("expires_ms")) is not int
    ):
        raise _refused("its payload is malformed")
    if claims.get("principal") != door.principal:
        raise _refused("it was issued to another principal")
    if claims.get("tool") != tool:
        raise _refused("it was issued for another tool")
    if claims["expires_ms"] <= time.time() * 1000:
        raise _refused("it has expired; call the tool again")
    execution_id: str = claims["execution"]
    return execution_id


def resuming(params: types.CallToolRequestParams) -> bool:
    """A 2026-07-28 retry of a call answered ``input_required`` (it echoes the state)."""
    return params.request_state is not None


async def resume(
    door: Door, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> dict[str, Any]:
    """The retried call: the execution the verified state names, read again (nothing new
    runs); its result once it has one, else the pending answer."""
    if not _modern(ctx):
        raise MCPError(code=INVALID_PARAMS, message="requestState is a 2026-07-28 parameter")
    execution_id = unseal(door, params.request_state, params.name)
    record = await executions.find_visible(door.services, door.principal, execution_id)
    if record is None or record.principal != door.principal:
        raise _refused("it names no execution of yours")
    response = (params.input_responses or {}).get(INPUT_KEY)
    action = getattr(response, "action", None)
    return await _continued(door, record, action if isinstance(action, str) else None)


# -- after the client's answer ---------------------------------------------------------------


async def _continued(door: Door, record: ExecutionRecord, action: str | None) -> dict[str, Any]:
    """The call's answer once the client answered the elicitation with ``action`` (None:
    it did not): the gateway's state is read again, never changed by the answer."""
    services = door.services
    record = await executions.latest(services, record)
    if action == "accept":
        # Past the principal's bound on waiters it answers what the execution is now.
        with contextlib.suppress(LimitExceeded):
            record = await executions.wait_for_end(services, door.principal, record, RESULT_WAIT_S)
    if record.terminal:
        out = results.call_result(record, door.base_url)
    else:
        approval = await executions.approval_of(services, record)
        out = results.pending_result(record, approval, door.base_url)
        out["content"].insert(0, {"type": "text", "text": _still(record, approval, action)})
    return results.within_output_schema(out, services.catalogue, record.tool_name)


def _still(record: ExecutionRecord, approval: ApprovalRecord | None, action: str | None) -> str:
    answered = {
        "accept": "the page was opened",
        "decline": "the request to open the page was declined",
        "cancel": "the request to open the page was dismissed",
    }.get(action or "", "the client did not answer")
    if approval is not None and approval.status == ApprovalStatus.PENDING:
        state = f"approval {approval.id} is still pending: an approver still has to decide it"
    else:
        state = f"execution {record.id} is {record.status.value}"
    return (
        f"{answered}, which decides nothing; {state}. Follow it with "
        f'{results.STATUS_TOOL} {{"execution_id": "{record.id}"}} (or as a task)'
    )
