"""The namespaced ``_meta`` keys of a ``tools/call`` (every one is in docs/mcp.md).

MCP has no field for most of the request contract (docs/api.md#request-body); a client
sends those parts under ``_meta`` with the ``io.toolgate/`` prefix. Parsing them here turns
them into the body of ``POST /v1/executions``, which ``parse_request`` checks like any other.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway import jsontext
from gateway.client.keys import call_key
from gateway.errors import MalformedRequest, ToolgateError

PREFIX = "io.toolgate/"
RUN_ID = PREFIX + "run_id"
TURN_ID = PREFIX + "turn_id"
CALL_ID = PREFIX + "call_id"
AGENT_ID = PREFIX + "agent_id"
WORKSPACE = PREFIX + "workspace"
IDEMPOTENCY_KEY = PREFIX + "idempotency_key"
REQUESTED_VERSION = PREFIX + "requested_version"
EXPECTED_STATE = PREFIX + "expected_state"
DEADLINE = PREFIX + "deadline"
APPROVAL_TOKEN = PREFIX + "approval_token"
CANCELLATION_TOKEN = PREFIX + "cancellation_token"
DRY_RUN = PREFIX + "dry_run"

REQUEST_KEYS: dict[str, str] = {
    RUN_ID: "run_id",
    TURN_ID: "turn_id",
    CALL_ID: "call_id",
    IDEMPOTENCY_KEY: "idempotency_key",
    DEADLINE: "deadline",
    APPROVAL_TOKEN: "approval_token",
    CANCELLATION_TOKEN: "cancellation_token",
    EXPECTED_STATE: "expected_state",
}
"""``_meta`` key → the field of the REST request body it fills."""

READ_KEYS = (*REQUEST_KEYS, AGENT_ID, WORKSPACE, REQUESTED_VERSION, DRY_RUN)
"""Every request ``_meta`` key the gateway reads (tests/test_docs.py checks docs/mcp.md)."""

# Keys of result ``_meta`` (what the gateway answers with), documented alongside.
EXECUTION_ID = PREFIX + "execution_id"
STATUS = PREFIX + "status"
OUTCOME = PREFIX + "outcome"
TOOL_VERSION = PREFIX + "tool_version"
SIDE_EFFECT = PREFIX + "side_effect"
EVIDENCE = PREFIX + "evidence"
ERROR = PREFIX + "error"
APPROVAL = PREFIX + "approval"
LINKS = PREFIX + "links"
DEPRECATED = PREFIX + "deprecated"
RISK = PREFIX + "risk"
IDEMPOTENCY = PREFIX + "idempotency"
WRITTEN_KEYS = (
    EXECUTION_ID,
    STATUS,
    OUTCOME,
    TOOL_VERSION,
    SIDE_EFFECT,
    EVIDENCE,
    ERROR,
    APPROVAL,
    LINKS,
    DEPRECATED,
    RISK,
    IDEMPOTENCY,
    RUN_ID,
    CALL_ID,
    DRY_RUN,
)

STATELESS_RUN = "mcp-calls"
"""The run of 2026-07-28 calls that name their call id but no run id (per principal)."""

TRACEPARENT = "traceparent"
"""W3C trace context in ``_meta`` (2026-07-28); the HTTP header of the same name otherwise."""


@dataclass(frozen=True, slots=True)
class CallOrigin:
    """Where a ``tools/call`` came from: what a default run id and call id derive from."""

    principal: str
    session_id: str | None
    request_id: str | int | None
    client_name: str
    default_workspace: str | None


def execution_body(
    name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any], origin: CallOrigin
) -> dict[str, Any]:
    """The ``POST /v1/executions`` body of one ``tools/call``."""
    args = dict(arguments or {})
    body: dict[str, Any] = {}
    for mkey, value in meta.items():  # (fewer than REQUEST_KEYS, as a rule)
        key = REQUEST_KEYS.get(mkey)
        if key is not None and value is not None:
            body[key] = value
    if "run_id" not in body:
        body["run_id"] = _default_run_id(origin, meta)
    named = "call_id" in body or bool(origin.session_id)  # as the defaults below judge
    if "call_id" not in body:
        body["call_id"] = _default_call_id(origin, name, args, meta)
    if named and "idempotency_key" not in body:  # as the kit derives one (toolkit.with_call_id)
        body["idempotency_key"] = call_key(body["run_id"], body["call_id"])
    body["tool"] = {"name": name}
    if meta.get(REQUESTED_VERSION) is not None:
        body["tool"]["requested_version"] = meta[REQUESTED_VERSION]
    body["arguments"] = args
    agent = meta.get(AGENT_ID)
    body["actor"] = {"agent_id": agent if agent is not None else origin.client_name[:256]}
    workspace = meta.get(WORKSPACE, origin.default_workspace)
    if workspace is None:
        raise MalformedRequest(
            f"name the workspace in _meta[{WORKSPACE!r}] (no default is configured: mcp.workspace)",
            code="workspace_required",
        )
    body["workspace"] = {"id": workspace}
    return body


UNNAMED_CALL = (
    "this tool requires an idempotency key, and nothing names this call (2026-07-28 without "
    f"_meta[{CALL_ID!r}]): name it with _meta[{CALL_ID!r}] (and {RUN_ID!r} if you like), "
    "whose key is then <run_id>/<call_id> so that a retry with the same ids is the same "
    f"call, or send a key of your own in _meta[{IDEMPOTENCY_KEY!r}]; nothing was run"
)
"""The refusal (``idempotency_key_required``) of a keyed tool's call that names no call."""


def phrased(exc: ToolgateError) -> ToolgateError:
    """``exc`` as the MCP door words it: a missing idempotency key says how to name the
    call over MCP (the pipeline's message names REST's field and header)."""
    if exc.code != KEY_REQUIRED:
        return exc
    return MalformedRequest(UNNAMED_CALL, code=KEY_REQUIRED, details=exc.details)


KEY_REQUIRED = "idempotency_key_required"


def dry_run(meta: Mapping[str, Any]) -> bool:
    """Whether the ``tools/call`` asks for a plan (``POST /v1/plans``) instead of a call."""
    value = meta.get(DRY_RUN)
    if value is not None and not isinstance(value, bool):
        raise MalformedRequest(
            f"{DRY_RUN} is true (answer with the plan of the call) or false; nothing was run",
            code="invalid_dry_run",
        )
    return value is True


def _default_run_id(origin: CallOrigin, meta: Mapping[str, Any]) -> str:
    """A 2025-11-25 session's calls are one run. Without a session (2026-07-28) a call that
    names its ``io.toolgate/call_id`` is in the principal's one run of named calls (so that
    the call id alone names it: a retry is the same call); any other is a run of its own.
    Nothing else of the request names a run: a trace id is shared by unrelated calls."""
    if origin.session_id:
        return f"mcp-{origin.session_id}"
    if meta.get(CALL_ID) is not None:
        return STATELESS_RUN
    return f"mcp-{uuid.uuid4().hex}"


def _default_call_id(
    origin: CallOrigin, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any]
) -> str:
    """In a 2025-11-25 session, the same request sent again (the session's JSON-RPC id, the
    tool, the arguments and the ``io.toolgate/*`` keys) is the same call: a session never
    reuses an id for another request. Without a session, a new call: clients reuse
    JSON-RPC ids (many send 1 every time), so an id names no call there (a client that
    wants a retry to be the same call names ``io.toolgate/call_id`` or an idempotency key)."""
    if not origin.session_id:
        return f"mcp-{uuid.uuid4().hex}"
    contract = {key: value for key, value in meta.items() if key.startswith(PREFIX)}
    try:
        text = jsontext.canonical([origin.request_id, name, dict(arguments), contract])
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise MalformedRequest("the arguments are not JSON", code="invalid_request") from exc
    return "mcp-" + digest[:32]
