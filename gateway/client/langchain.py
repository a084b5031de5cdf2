"""The catalogue as LangChain ``StructuredTool``s (extra ``langchain``:
``pip install 'toolgate[langchain]'``). Every invocation is a call through the gateway;
the tool's answer is the JSON an agent reads (``gateway.client.toolkit.answer``).

Each invocation is its own call, as with the Agents SDK adapter: invoked with a model's
``ToolCall`` (``{"type": "tool_call", "id": ..., "args": ...}``, what an agent loop passes),
its id is the gateway's call id and the idempotency key is derived from it, so a retry of
that tool call is the same call; invoked with bare arguments, it is a new call with a key of
its own (``gateway.client.toolkit.with_call_id``).

Given an ``approver`` (the client of a person allowed to decide, never the agent's), a call
the gateway parks for approval is a LangGraph ``interrupt`` in the shape of LangChain's
``HumanInTheLoopMiddleware``: its value a ``HITLRequest`` (one action request: the tool, the
arguments the approval binds, the gateway's reasons and page; decisions ``approve``, ``edit``,
``reject``), resumed with a ``HITLResponse`` (``{"decisions": [decision]}``). The decision is
made on the gateway as the approver: approve, approve with the edited arguments (the
gateway's edit-before-approve: a new argument hash and a fresh policy check), or deny; the
tool then answers the gateway's result. A decision the gateway refuses as a bad edit
(``EditRefused``) or a response of another shape changes nothing and interrupts again, saying
why; any other refusal (403 ``not_an_approver``, ``self_approval``) is raised."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from langchain_core.tools import StructuredTool

from gateway.client.client import AsyncClient, CallOptions, Client, Execution, same_key
from gateway.client.errors import ApiError, Conflict, EditRefused
from gateway.client.toolkit import (
    ToolSpec,
    answer,
    catalogue,
    pending_approval,
    refused,
    review,
    text,
    with_call_id,
)

DECISIONS = ["approve", "edit", "reject"]

_TOOL_CALL_ID: ContextVar[str | None] = ContextVar("toolgate_tool_call_id", default=None)
"""The id of the ``ToolCall`` being run, for the tool's function (LangChain passes a tool
call id to ``BaseTool.run`` and ``arun`` only; a JSON Schema ``args_schema`` cannot have it
injected as an argument)."""


class GatewayTool(StructuredTool):
    """A ``StructuredTool`` whose function learns the id of the tool call it runs."""

    def run(self, *args: Any, tool_call_id: str | None = None, **kwargs: Any) -> Any:
        token = _TOOL_CALL_ID.set(tool_call_id)
        try:
            return super().run(*args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _TOOL_CALL_ID.reset(token)

    async def arun(self, *args: Any, tool_call_id: str | None = None, **kwargs: Any) -> Any:
        token = _TOOL_CALL_ID.set(tool_call_id)
        try:
            return await super().arun(*args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _TOOL_CALL_ID.reset(token)


def hitl_request(
    spec: ToolSpec, approval: Mapping[str, Any], arguments: Mapping[str, Any], note: str = ""
) -> dict[str, Any]:
    """The interrupt's value for a parked call: a ``HITLRequest`` of
    ``HumanInTheLoopMiddleware`` whose action is the call with the ``arguments`` its
    ``approval`` (the execution's: id, reasons, page) binds."""
    description = review(approval) + (f". {note}" if note else "")
    return {
        "action_requests": [
            {"name": spec.llm_name, "args": dict(arguments), "description": description}
        ],
        "review_configs": [{"action_name": spec.llm_name, "allowed_decisions": DECISIONS}],
    }


def _decision(response: Any, spec: ToolSpec) -> tuple[dict[str, Any] | None, str]:
    """The one decision of a ``HITLResponse``, or why it is not one."""
    decisions = response.get("decisions") if isinstance(response, Mapping) else None
    if not isinstance(decisions, list) or len(decisions) != 1:
        return None, 'the answer must be {"decisions": [one decision]}'
    decision = decisions[0]
    kind = decision.get("type") if isinstance(decision, Mapping) else None
    if kind not in DECISIONS:
        return None, f"a decision's type is one of {', '.join(DECISIONS)}"
    action = decision.get("edited_action")
    if kind == "edit" and not (
        isinstance(action, Mapping)
        and action.get("name", spec.llm_name) == spec.llm_name
        and isinstance(action.get("args"), Mapping)
    ):
        return None, f"an edit gives edited_action.args of {spec.llm_name} (not another tool)"
    return dict(decision), ""


def settle(client: Client, approver: Client, spec: ToolSpec, execution: Execution) -> Execution:
    """Interrupt for a parked call until the person's decision is one the gateway takes, make
    it there as ``approver``, and return the call's end (``client``, the agent's, only reads)."""
    from langgraph.types import interrupt

    note = ""
    while (approval := pending_approval(execution)) is not None:
        bound = client.approval(str(approval["id"]))  # the requester reads it too
        asked = hitl_request(spec, approval, bound["arguments"], note)
        decision, note = _decision(interrupt(asked), spec)
        if decision is None:
            continue
        try:
            if decision["type"] == "reject":
                approver.deny(bound["id"], decision.get("message"))
            else:
                edited = decision["edited_action"]["args"] if decision["type"] == "edit" else None
                approver.approve(bound["id"], arguments=edited)
        except EditRefused as exc:
            note = f"the edit was refused: {exc.detail}"
            continue
        except Conflict:
            pass  # decided already (on the page, by another approver): its end is the answer
        break
    return execution if execution.terminal else client.wait(execution.id)


def structured_tool(
    client: Client,
    spec: ToolSpec,
    options: CallOptions | None = None,
    async_client: AsyncClient | None = None,
    approver: Client | None = None,
) -> StructuredTool:
    """One catalogue tool as a ``StructuredTool`` (``invoke`` through ``client``; ``ainvoke``
    through ``async_client`` when given, else ``client`` in a thread). ``approver``: a call
    the gateway parks is an interrupt, decided on the gateway as ``approver`` (``settle``)."""
    base = options or client.defaults
    if approver is not None and same_key(client, approver):
        raise ValueError("an agent's own key never decides its calls: pass the approver's")

    # a refusal of the agent's call is the model's to read; a refusal of the approver's
    # decision (403 not_an_approver, self_approval) is raised: theirs to know
    def run(**arguments: Any) -> str:
        options = with_call_id(base, _TOOL_CALL_ID.get())
        try:
            execution = client.execute(spec.name, arguments, options)
        except ApiError as exc:
            return text(refused(exc))
        if approver is not None:
            execution = settle(client, approver, spec, execution)
        return text(answer(execution))

    async def arun(**arguments: Any) -> str:
        assert async_client is not None
        options = with_call_id(base, _TOOL_CALL_ID.get())
        try:
            execution = await async_client.execute(spec.name, arguments, options)
        except ApiError as exc:
            return text(refused(exc))
        if approver is not None and pending_approval(execution) is not None:
            # the decision through the sync clients, the interrupt in the run's context
            execution = await asyncio.to_thread(settle, client, approver, spec, execution)
        return text(answer(execution))

    return GatewayTool.from_function(
        func=run,
        coroutine=arun if async_client is not None else None,
        name=spec.llm_name,
        description=spec.description or spec.name,
        args_schema=dict(spec.parameters),
        infer_schema=False,
    )


def structured_tools(
    client: Client,
    options: CallOptions | None = None,
    async_client: AsyncClient | None = None,
    approver: Client | None = None,
) -> list[StructuredTool]:
    """Every enabled tool of the catalogue as a ``StructuredTool``."""
    specs = catalogue(client)
    return [structured_tool(client, s, options, async_client, approver) for s in specs]
