"""The catalogue as OpenAI Agents SDK ``FunctionTool``s (extra ``agents``:
``pip install 'toolgate[agents]'``). Every invocation is a call through the gateway.

``needs_approval``: with ``approval="plan"`` the SDK's own approval hook asks the gateway
for the call's plan (``POST /v1/plans``) and pauses the run exactly when the gateway's
policy would want a person; the gateway still enforces its own approval on the call.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from gateway.client.client import AsyncClient, CallOptions
from gateway.client.errors import ApiError
from gateway.client.toolkit import ToolSpec, acatalogue, answer, refused, text, with_call_id

Approval = Literal["gateway", "plan"]


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
            execution = await client.execute(spec.name, arguments, call_options)
        except ApiError as exc:
            return text(refused(exc))
        return text(answer(execution))

    async def needs_approval(
        ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        try:
            plan = await client.plan(spec.name, params, with_call_id(base, call_id))
        except ApiError:
            return False  # the call itself will be refused the same way
        return plan.get("would") == "await_approval"

    return FunctionTool(
        name=spec.llm_name,
        description=spec.description,
        params_json_schema=dict(spec.parameters),
        on_invoke_tool=invoke,
        strict_json_schema=False,
        needs_approval=needs_approval if approval == "plan" else False,
    )


async def function_tools(
    client: AsyncClient, options: CallOptions | None = None, approval: Approval = "gateway"
) -> list[FunctionTool]:
    """Every enabled tool of the catalogue as a ``FunctionTool``."""
    return [function_tool(client, s, options, approval) for s in await acatalogue(client)]
