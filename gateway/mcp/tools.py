"""The catalogue as MCP tools: each tool the policy lets a principal see
(``gateway/service/catalogue.py``) as an MCP ``Tool``, with the annotations its declaration
implies. A deprecated version says so in its description (as in every format:
``definitions.description``) and in ``_meta``.
"""

from __future__ import annotations

from typing import Any

from gateway.declarations.definitions import tool_definition
from gateway.declarations.model import ToolDeclaration
from gateway.mcp import meta
from gateway.types import SideEffect

OPEN_WORLD_ADAPTERS = frozenset({"http", "browser"})
"""Adapters that reach beyond the gateway's own machine and workspace."""


def mcp_tool(tool: ToolDeclaration) -> dict[str, Any]:
    """One MCP ``Tool``: the JSON Schema ``GET /v1/tools?format=mcp`` publishes, and the
    annotations the declaration implies, each set explicitly (MCP's defaults assume the
    worst: destructive and open-world)."""
    definition = tool_definition(tool, "mcp")
    out: dict[str, Any] = {
        "name": definition["name"],
        "title": f"{tool.name} {tool.version}",
        "description": definition["description"],
        "inputSchema": definition["inputSchema"],
        "annotations": tool_annotations(tool),
        "_meta": {
            meta.TOOL_VERSION: str(tool.version),
            meta.RISK: tool.risk.value,
            meta.DEPRECATED: tool.deprecated,
            meta.IDEMPOTENCY: tool.idempotency,  # as GET /v1/tools says it
        },
    }
    # Only a declared `output:` is published: a result that breaks it never reaches a
    # client as structuredContent (results.within_output_schema).
    if "outputSchema" in definition:
        out["outputSchema"] = definition["outputSchema"]
    return out


def tool_annotations(tool: ToolDeclaration) -> dict[str, Any]:
    writes = tool.side_effect in (SideEffect.WRITE, SideEffect.EXTERNAL)
    return {
        "title": f"{tool.name} {tool.version}",
        "readOnlyHint": not writes,
        "destructiveHint": writes and not tool.reversible,
        "idempotentHint": not writes or tool.idempotency == "required",
        "openWorldHint": tool.adapter in OPEN_WORLD_ADAPTERS,
    }
