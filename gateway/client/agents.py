"""The catalogue as OpenAI Agents SDK ``FunctionTool``s (extra ``agents``:
``pip install 'toolgate[agents]'``). Every invocation is a call through the gateway.

``approval`` says how the gateway's approvals meet the SDK's own human-in-the-loop
(``needs_approval``, interruptions, ``RunState.approve``/``reject``):

- ``"gateway"`` (default): they do not; a parked call answers the model ``awaiting_approval``.
- ``"plan"``: the hook asks for the call's plan (``POST /v1/plans``) and interrupts the run
  when the gateway's policy would want a person; the SDK's approval is the agent builder's,
  and the gateway still asks its own approver.
- ``"interrupt"``: a call the gateway parks for approval is an interruption of the run, and
  an ``Approver`` (the approver's own client) decides it on the gateway, recording the
  decision on the ``RunState``; the resumed run answers the model the gateway's result.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from agents import FunctionTool, RunContextWrapper, RunState
from agents.items import ToolApprovalItem
from agents.tool_context import ToolContext

from gateway.client.client import AsyncClient, CallOptions, Execution, same_key
from gateway.client.errors import ApiError, ToolgateClientError
from gateway.client.toolkit import (
    ToolSpec,
    acatalogue,
    answer,
    pending_approval,
    refused,
    text,
    with_call_id,
)

Approval = Literal["gateway", "plan", "interrupt"]


def function_tool(
    client: AsyncClient,
    spec: ToolSpec,
    options: CallOptions | None = None,
    approval: Approval = "gateway",
) -> FunctionTool:
    """One catalogue tool as a ``FunctionTool`` whose invocation runs it through ``client``."""
    base = options or client.defaults

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        try:
            arguments = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            return text({"outcome": "refused", "error": {"message": f"not JSON: {exc}"}})
        call_options = with_call_id(base, getattr(ctx, "tool_call_id", None))
        try:
            # the same tool call is the same call: after an interruption, the parked one
            execution = await client.execute(spec.name, arguments, call_options)
            decided = not execution.terminal and pending_approval(execution) is None
            if approval == "interrupt" and decided:  # approved on the gateway: its result
                execution = await client.wait(execution.id)
        except ApiError as exc:
            return text(refused(exc))
        return text(answer(execution))

    async def plan_asks(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        try:
            plan = await client.plan(spec.name, params, with_call_id(base, call_id))
        except ApiError:
            return False  # the call itself will be refused the same way
        return plan.get("would") == "await_approval"

    async def parks(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        # only a call the plan says would wait is sent now (it parks: nothing runs), so
        # nothing runs before the SDK's own checks of the invocation
        if not await plan_asks(ctx, params, call_id):
            return False
        try:
            execution = await client.execute(spec.name, params, with_call_id(base, call_id))
        except ApiError:
            return False  # the invocation answers the refusal
        return pending_approval(execution) is not None

    hook = plan_asks if approval == "plan" else parks if approval == "interrupt" else False
    return FunctionTool(
        name=spec.llm_name,
        description=spec.description,
        params_json_schema=dict(spec.parameters),
        on_invoke_tool=invoke,
        strict_json_schema=False,
        needs_approval=hook,
    )


async def function_tools(
    client: AsyncClient, options: CallOptions | None = None, approval: Approval = "gateway"
) -> list[FunctionTool]:
    """Every enabled tool of the catalogue as a ``FunctionTool``."""
    return [function_tool(client, s, options, approval) for s in await acatalogue(client)]


class Approver:
    """A person deciding the calls that interrupted an Agents SDK run (``approval="interrupt"``)
    on the gateway, with their own client: ``approve``/``reject`` decide the call's approval
    (``POST /v1/approvals/{id}/approve|deny``) as that principal, then record the decision on
    the ``RunState`` (``RunState.approve``/``reject``) for the run to resume with.

    ``client`` (and ``options``: those of the tools) is the agent's: it only reads the parked
    execution of an interruption (``GET /v1/executions?run_id=&call_id=``), never decides.
    A decision the gateway refuses (403 ``self_approval``, ``not_an_approver``; 409 when it
    was decided already) raises its ``ApiError`` and leaves the ``RunState`` as it was."""

    def __init__(
        self, client: AsyncClient, approver: AsyncClient, options: CallOptions | None = None
    ) -> None:
        if same_key(client, approver):
            raise ValueError("an agent's own key never decides its calls: pass the approver's")
        self.client, self.approver = client, approver
        self.options = options or client.defaults

    async def parked(self, item: ToolApprovalItem) -> Execution:
        """The parked execution of an interruption (with its ``approval``: id, reasons, page)."""
        call_id, run_id = item.call_id, self.options.run_id
        found = await self.client.find(run_id=run_id, call_id=call_id) if call_id else []
        if not found or not found[0].approval:
            raise ToolgateClientError(
                f"no call of run {run_id} waits for approval as tool call {call_id} (the "
                "tools' options and the Approver's must be the same)"
            )
        return found[0]

    async def approval(self, item: ToolApprovalItem) -> dict[str, Any]:
        """The gateway's approval of an interruption, as the approver reads it (arguments,
        preview, reasons): what to show the person."""
        approval = (await self.parked(item)).approval or {}
        return await self.approver.approval(str(approval["id"]))

    async def approve(
        self, state: RunState[Any, Any], item: ToolApprovalItem, comment: str | None = None
    ) -> dict[str, Any]:
        """Approve the call on the gateway (it runs there), then ``state.approve(item)``: the
        resumed run answers the model the call's outcome."""
        approval = (await self.parked(item)).approval or {}
        decided = await self.approver.approve(str(approval["id"]), comment)
        state.approve(item)
        return decided

    async def reject(
        self, state: RunState[Any, Any], item: ToolApprovalItem, comment: str | None = None
    ) -> dict[str, Any]:
        """Deny the call on the gateway (it ends ``failed``, ``approval_denied``), then
        ``state.reject(item)`` with the gateway's result as what the model reads."""
        parked = await self.parked(item)
        approval = parked.approval or {}
        decided = await self.approver.deny(str(approval["id"]), comment)
        ended = await self.client.get(parked.id)
        state.reject(item, rejection_message=text(answer(ended)))
        return decided
