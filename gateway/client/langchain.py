"""The catalogue as LangChain ``StructuredTool``s (extra ``langchain``:
``pip install 'toolgate[langchain]'``). Every invocation is a call through the gateway;
the tool's answer is the JSON an agent reads (``gateway.client.toolkit.answer``)."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import StructuredTool

from gateway.client.client import AsyncClient, CallOptions, Client
from gateway.client.errors import ApiError
from gateway.client.toolkit import ToolSpec, answer, catalogue, refused, text


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
        try:
            return text(answer(client.execute(spec.name, arguments, base)))
        except ApiError as exc:
            return text(refused(exc))

    async def arun(**arguments: Any) -> str:
        assert async_client is not None
        try:
            return text(answer(await async_client.execute(spec.name, arguments, base)))
        except ApiError as exc:
            return text(refused(exc))

    return StructuredTool.from_function(
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
