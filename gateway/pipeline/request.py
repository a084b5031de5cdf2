"""Parse an execution request body (already JSON-decoded) into a ToolExecutionRequest.

This is the edge for agent input: unknown keys, wrong types and an actor that is not the
authenticated principal are refused here, before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic import ValidationError as PydanticValidationError

from gateway import jsonlimits, tracecontext
from gateway.errors import Forbidden, MalformedRequest
from gateway.pipeline.records import ToolExecutionRequest
from gateway.yamlsrc import list_wording

# C0 and C1 control characters (NUL, newline, ESC...): an identifier carrying one can forge
# lines in logs and terminals and breaks the header it may be copied into. And the bidirectional
# controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069): one reorders how the rest of
# an id, or of the line it is shown in (the page, a log, a terminal), reads.
CONTROLS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{CONTROLS}]")
PRINTABLE = f"^[^{CONTROLS}]*$"
"""No control character, as a pattern pydantic-core checks itself along with the lengths (no
Python call per string). Its Rust engine's ``$`` is the end of the text, never before a final
newline (Python's would let ``"id\\n"`` through)."""
_PRINTABLE_PROBLEM = "Value error, must not contain control characters"
MAX_ID_LENGTH = 256
LATEST_DEADLINE_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: a later deadline is no deadline, and overflows a float."""


def _printable(min_length: int, max_length: int) -> StringConstraints:
    return StringConstraints(pattern=PRINTABLE, min_length=min_length, max_length=max_length)


# Strings of the request that are recorded, logged or compared: no control characters.
Id = Annotated[str, _printable(1, MAX_ID_LENGTH)]
Text = Annotated[str, _printable(0, MAX_ID_LENGTH)]
Name = Annotated[str, _printable(1, 128)]
Version = Annotated[str, _printable(0, 128)]
Token = Annotated[str, _printable(0, 4096)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, regex_engine="rust-regex")


class ToolRef(_Body):
    name: Name
    requested_version: Version | None = None


class ActorBody(_Body):
    user_id: Id | None = None
    """The principal is the user; a ``user_id`` sent must be the principal."""
    agent_id: Text = ""


class WorkspaceBody(_Body):
    id: Id
    root: str | None = None


class ExecutionRequestBody(_Body):
    """The JSON body of ``POST /v1/executions`` (docs/api.md#request-body)."""

    run_id: Id
    turn_id: Text = ""
    call_id: Id
    tool: ToolRef
    arguments: dict[str, Any] = Field(default_factory=dict)
    actor: ActorBody | None = None
    workspace: WorkspaceBody
    deadline: int | None = Field(
        default=None, gt=0, le=LATEST_DEADLINE_MS, description="epoch milliseconds"
    )
    cancellation_token: Text | None = None
    idempotency_key: Id | None = None
    approval_token: Token | None = None
    expected_state: dict[str, Any] = Field(default_factory=dict)


def parse_request(
    body: Any,
    principal: str,
    header_idempotency_key: str | None = None,
    traceparent_headers: Sequence[str] = (),
    roles: tuple[str, ...] = (),
    auth_method: str = "",
    *,
    body_bound: jsonlimits.Bound | None = None,
) -> ToolExecutionRequest:
    """Validate ``body`` for ``principal`` (authenticated by ``auth_method``, with a
    credential holding ``roles``); raises
    MalformedRequest or Forbidden. The execution's trace context is the ``traceparent``
    header's, or a new trace (a malformed header is ignored). ``body_bound``: the door checked
    ``body`` against the JSON limits (``Checked.bound``), so its arguments need no check
    again (``ToolExecutionRequest.arguments_bound``)."""
    if not isinstance(body, dict):
        raise MalformedRequest("the request body must be a JSON object")
    try:
        parsed = ExecutionRequestBody.model_validate(body)
    except PydanticValidationError as exc:
        raise MalformedRequest(
            "invalid request: " + _describe(exc),
            code="invalid_request",
            details={"errors": _errors(exc)},
        ) from exc
    actor = parsed.actor
    if actor is not None and actor.user_id is not None and actor.user_id != principal:
        raise Forbidden(
            f"actor.user_id {actor.user_id!r} is not the authenticated principal",
            code="actor_mismatch",
        )
    key = parsed.idempotency_key
    if header_idempotency_key is not None:
        _check_header_key(header_idempotency_key)
        if key is not None and key != header_idempotency_key:
            raise MalformedRequest(
                "the Idempotency-Key header and idempotency_key in the body differ",
                code="idempotency_key_conflict",
            )
        key = header_idempotency_key
    arguments = parsed.arguments
    return ToolExecutionRequest(
        principal=principal,
        run_id=parsed.run_id,
        turn_id=parsed.turn_id,
        call_id=parsed.call_id,
        tool_name=parsed.tool.name,
        requested_version=parsed.tool.requested_version,
        arguments=arguments,
        agent_id=actor.agent_id if actor else "",
        workspace_id=parsed.workspace.id,
        workspace_root=parsed.workspace.root,
        deadline_ms=parsed.deadline,
        cancellation_token=parsed.cancellation_token,
        idempotency_key=key,
        approval_token=parsed.approval_token,
        expected_state=parsed.expected_state,
        body=body,
        traceparent=tracecontext.incoming(traceparent_headers),
        auth_method=auth_method,
        roles=roles,
        arguments_bound=body_bound,
    )


def is_id(text: str) -> bool:
    """Whether ``text`` is what an ``Id`` field of the body takes: 1 to ``MAX_ID_LENGTH``
    characters, none a control character."""
    return 1 <= len(text) <= MAX_ID_LENGTH and _CONTROL.search(text) is None


def _check_header_key(key: str) -> None:
    """The header carries what the body field may: 1 to 256 characters, none a control."""
    if not is_id(key):
        raise MalformedRequest(
            f"the Idempotency-Key header must be 1 to {MAX_ID_LENGTH} characters with no "
            f"control characters (got {len(key)})",
            code="invalid_request",
            details={"errors": [{"field": "Idempotency-Key", "problem": "invalid key"}]},
        )


def _errors(exc: PydanticValidationError) -> list[dict[str, str]]:
    return [
        {
            "field": ".".join(str(p) for p in err["loc"]) or "(body)",
            "problem": _PRINTABLE_PROBLEM
            if err["type"] == "string_pattern_mismatch"
            else list_wording(err["msg"]),
        }
        for err in exc.errors(include_url=False)
    ]


def _describe(exc: PydanticValidationError) -> str:
    parts = []
    for err in _errors(exc)[:10]:
        problem = "unknown field" if err["problem"].startswith("Extra inputs") else err["problem"]
        parts.append(f"{err['field']}: {problem}")
    return "; ".join(parts)
