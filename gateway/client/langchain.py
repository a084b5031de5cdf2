"""The catalogue as LangChain ``StructuredTool``s (extra ``langchain``:
``pip install 'toolgate[langchain]'``). Every invocation is a call through the gateway;
the tool's answer is the JSON an agent reads (``gateway.client.toolkit.answer``).

Each invocation is its own call, as with the Agents SDK adapter: invoked with a model's
``ToolCall`` (``{"type": "tool_call", "id": ..., "args": ...}``, what an agent loop passes),
its id is the gateway's call id and the idempotency key is derived from it, so a retry of
that tool call is the same call; invoked with bare arguments, it is a new call with a key of
its own (``gateway.client.toolkit.with_call_id``)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from langchain_core.tools import StructuredTool

from gateway.client.client import AsyncClient, CallOptions, Client
from gateway.client.errors import ApiError
from gateway.client.toolkit import ToolSpec, answer, catalogue, refused, text, with_call_id

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


def structured_tool(
    client: Client,
    spec: ToolSpec,
    options: CallOptions | None = None,
    async_client: AsyncClient | None = None,
) -> StructuredTool:
    """One catalogue tool as a ``StructuredTool`` (``invoke`` through ``client``; ``ainvoke``
    through ``async_client`` when given, else ``client`` in a thread)."""
    base = options or client.defaults

    def run(**arguments: Any) -> str:
        options = with_call_id(base, _TOOL_CALL_ID.get())
        try:
            return text(answer(client.execute(spec.name, arguments, options)))
        except ApiError as exc:
            return text(refused(exc))

    async def arun(**arguments: Any) -> str:
        assert async_client is not None
        options = with_call_id(base, _TOOL_CALL_ID.get())
        try:
            return text(answer(await async_client.execute(spec.name, arguments, options)))
        except ApiError as exc:
            return text(refused(exc))

    return GatewayTool.from_function(
        func=run,
        coroutine=arun if async_client is not None else None,
        name=spec.llm_name,
        description=spec.description or spec.name,
        args_schema=dict(spec.parameters),
        infer_schema=False,
    )


def structured_tools(
    client: Client, options: CallOptions | None = None, async_client: AsyncClient | None = None
) -> list[StructuredTool]:
    """Every enabled tool of the catalogue as a ``StructuredTool``."""
    return [structured_tool(client, s, options, async_client) for s in catalogue(client)]
