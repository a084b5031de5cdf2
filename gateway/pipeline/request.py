"""Parse an execution request body (already JSON-decoded) into a ToolExecutionRequest.

This is the edge for agent input: unknown keys, wrong types and an actor that is not the
authenticated principal are refused here, before anything runs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from gateway.errors import Forbidden, MalformedRequest
from gateway.pipeline.records import ToolExecutionRequest

_ID = Field(min_length=1, max_length=256)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolRef(_Body):
    name: str = Field(min_length=1, max_length=128)
    requested_version: str | None = Field(default=None, max_length=128)


class ActorBody(_Body):
    user_id: str = _ID
    agent_id: str = Field(default="", max_length=256)


class WorkspaceBody(_Body):
    id: str = _ID
    root: str | None = None


class ExecutionRequestBody(_Body):
    """The JSON body of ``POST /v1/executions`` (docs/api.md#request-body)."""

    run_id: str = _ID
    turn_id: str = Field(default="", max_length=256)
    call_id: str = _ID
    tool: ToolRef
    arguments: dict[str, Any] = Field(default_factory=dict)
    actor: ActorBody | None = None
    workspace: WorkspaceBody
    deadline: int | None = Field(default=None, gt=0, description="epoch milliseconds")
    cancellation_token: str | None = Field(default=None, max_length=256)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    approval_token: str | None = Field(default=None, max_length=4096)
    expected_state: dict[str, Any] = Field(default_factory=dict)


def parse_request(
    body: Any, principal: str, header_idempotency_key: str | None = None
) -> ToolExecutionRequest:
    """Validate ``body`` for ``principal``; raises MalformedRequest or Forbidden."""
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
    if parsed.actor is not None and parsed.actor.user_id != principal:
        raise Forbidden(
            f"actor.user_id {parsed.actor.user_id!r} is not the authenticated principal",
            code="actor_mismatch",
        )
    key = parsed.idempotency_key
    if header_idempotency_key is not None:
        if key is not None and key != header_idempotency_key:
            raise MalformedRequest(
                "the Idempotency-Key header and idempotency_key in the body differ",
                code="idempotency_key_conflict",
            )
        key = header_idempotency_key
    return ToolExecutionRequest(
        principal=principal,
        run_id=parsed.run_id,
        turn_id=parsed.turn_id,
        call_id=parsed.call_id,
        tool_name=parsed.tool.name,
        requested_version=parsed.tool.requested_version,
        arguments=parsed.arguments,
        agent_id=parsed.actor.agent_id if parsed.actor else "",
        workspace_id=parsed.workspace.id,
        workspace_root=parsed.workspace.root,
        deadline_ms=parsed.deadline,
        cancellation_token=parsed.cancellation_token,
        idempotency_key=key,
        approval_token=parsed.approval_token,
        expected_state=parsed.expected_state,
        body=body,
    )


def _errors(exc: PydanticValidationError) -> list[dict[str, str]]:
    return [
        {"field": ".".join(str(p) for p in err["loc"]) or "(body)", "problem": err["msg"]}
        for err in exc.errors(include_url=False)
    ]


def _describe(exc: PydanticValidationError) -> str:
    parts = []
    for err in _errors(exc)[:10]:
        problem = "unknown field" if err["problem"].startswith("Extra inputs") else err["problem"]
        parts.append(f"{err['field']}: {problem}")
    return "; ".join(parts)
