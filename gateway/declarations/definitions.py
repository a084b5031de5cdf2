"""A tool declaration as the definitions agent frameworks take: an LLM function tool, OpenAI's
and Anthropic's shapes, and MCP's (every door that lists tools renders them here)."""

from __future__ import annotations

from typing import Any

from gateway.declarations.jsonschema import cerberus_to_json_schema
from gateway.declarations.model import ToolDeclaration


def llm_name(tool: ToolDeclaration) -> str:
    """The tool's name as LLM APIs accept it (``^[a-zA-Z0-9_-]+$``: dots become ``__``)."""
    return tool.name.replace(".", "__")


def description(tool: ToolDeclaration) -> str:
    """The description a model reads, in every format: a deprecated version says so first
    (``[deprecated: why] ...``)."""
    if not tool.deprecated:
        return tool.description
    why = tool.deprecated if isinstance(tool.deprecated, str) else "deprecated"
    return f"[deprecated: {why}] {tool.description}"


def _described(
    name: str, tool: ToolDeclaration, key: str, schema: dict[str, Any]
) -> dict[str, Any]:
    """The part every format shares: a name, the description, the input schema at ``key``."""
    return {"name": name, "description": description(tool), key: _without_extensions(schema)}


def llm_tool(tool: ToolDeclaration, schema: dict[str, Any]) -> dict[str, Any]:
    return _described(llm_name(tool), tool, "parameters", schema)


def _openai(tool: ToolDeclaration, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": llm_tool(tool, schema)}


def _anthropic(tool: ToolDeclaration, schema: dict[str, Any]) -> dict[str, Any]:
    return _described(llm_name(tool), tool, "input_schema", schema)


def _mcp(tool: ToolDeclaration, schema: dict[str, Any]) -> dict[str, Any]:
    out = _described(tool.name, tool, "inputSchema", schema)
    output = output_schema(tool)
    if output is not None:
        out["outputSchema"] = _without_extensions(output)
    return out


TOOL_FORMATS = {"llm": llm_tool, "openai": _openai, "anthropic": _anthropic, "mcp": _mcp}
"""``GET /v1/tools?format=``: the shape of each item, as each kind of agent framework takes it."""


def tool_definition(tool: ToolDeclaration, fmt: str) -> dict[str, Any]:
    """The tool as an LLM tool definition in ``fmt`` (a key of ``TOOL_FORMATS``)."""
    schema = cerberus_to_json_schema(tool.input, purge_readonly=True)
    return TOOL_FORMATS[fmt](tool, schema)


def output_schema(tool: ToolDeclaration) -> dict[str, Any] | None:
    """The JSON Schema of the result's ``data`` (``output:``), or None when none is declared."""
    if tool.output is None:
        return None
    return cerberus_to_json_schema(tool.output)


def definition_name(tool: ToolDeclaration, fmt: str) -> str:
    """The name the model will call the tool by in ``fmt`` (MCP keeps the dots)."""
    return tool.name if fmt == "mcp" else llm_name(tool)


def _without_extensions(value: Any) -> Any:
    """The schema without ``x-`` keys, at every depth (LLM tool definitions reject them)."""
    if isinstance(value, dict):
        return {
            k: _without_extensions(v)
            for k, v in value.items()
            if not (isinstance(k, str) and k.startswith("x-"))
        }
    if isinstance(value, list):
        return [_without_extensions(v) for v in value]
    return value
