"""The catalogue as MCP tools: what ``tools/list`` answers a principal.

A tool is listed when the policy could ever allow the principal to call it: the policy is
asked about a probe call (the tool, the principal, the workspace, no arguments) and a tool
whose probe is denied is left out. Nothing of the policy's logic is repeated here. The
newest enabled version is listed (a call resolves it too, unless ``_meta`` names another);
a deprecated one says so in its description and in ``_meta``.
"""

from __future__ import annotations

from typing import Any

from gateway.declarations.definitions import tool_definition
from gateway.declarations.model import ToolDeclaration
from gateway.mcp import meta
from gateway.pipeline.policy import credential_input, tool_input
from gateway.pipeline.records import sha256_json
from gateway.runtime.container import Runtime
from gateway.types import DecisionResult, SideEffect

OPEN_WORLD_ADAPTERS = frozenset({"http", "browser"})
"""Adapters that reach beyond the gateway's own machine and workspace."""


def listed(services: Runtime) -> list[ToolDeclaration]:
    """The newest enabled version of every tool (a tool with none enabled is not listed)."""
    catalogue = services.catalogue
    out = []
    for name in catalogue.names:
        enabled = [v for v in catalogue.versions(name) if not v.disabled]
        if enabled:
            out.append(enabled[0])
    return out


async def visible(
    services: Runtime,
    principal: str,
    workspace_id: str | None,
    roles: tuple[str, ...] = (),
    auth_method: str = "",
) -> list[Any]:
    """The MCP tool objects ``principal`` (authenticated by ``auth_method``, its credential
    holding ``roles``) may see, in catalogue order (all of one generation of the runtime,
    held while the policy is asked)."""
    tools = []
    with services.lease() as services:
        for tool in listed(services):
            probe = probe_input(services, principal, workspace_id, tool, roles, auth_method)
            if await _could_allow(services, workspace_id, probe):
                tools.append(mcp_tool(tool))
    return tools


async def _could_allow(services: Runtime, workspace_id: str | None, probe: dict[str, Any]) -> bool:
    if services.workspaces.get(workspace_id or "") is None:
        return False  # no call could run there: the policy need not be asked
    decision = await services.policy.decide(probe)
    return decision.result is not DecisionResult.DENY


def probe_input(
    services: Runtime,
    principal: str,
    workspace_id: str | None,
    tool: ToolDeclaration,
    roles: tuple[str, ...] = (),
    auth_method: str = "",
) -> dict[str, Any]:
    """A policy input document (docs/policies.md) for a call of ``tool`` with no arguments."""
    workspace = services.workspaces.get(workspace_id or "")
    return {
        "tool": tool_input(tool),
        "arguments": {},
        "arguments_sha256": sha256_json({}),
        "paths": [],
        "actor": {
            "user_id": principal,
            "agent_id": "",
            "roles": list(services.roles(principal, roles)),
            "credential": credential_input(auth_method, roles),
        },
        "workspace": {
            "id": workspace_id or "(none)",
            "root": str(workspace.root) if workspace else "",
        },
        "request": {
            "run_id": "mcp-tools-list",
            "turn_id": "",
            "call_id": "mcp-tools-list",
            "deadline_ms_left": None,
            "idempotency_key_present": True,
            "time_ms": 0,
        },
        "approval": {"present": False, "approved_by": None},
        "usage": {},
    }


def mcp_tool(tool: ToolDeclaration) -> dict[str, Any]:
    """One MCP ``Tool``: the JSON Schema ``GET /v1/tools?format=mcp`` publishes, and the
    annotations the declaration implies, each set explicitly (MCP's defaults assume the
    worst: destructive and open-world)."""
    definition = tool_definition(tool, "mcp")
    description = tool.description
    if tool.deprecated:
        why = tool.deprecated if isinstance(tool.deprecated, str) else "deprecated"
        description = f"[deprecated: {why}] {description}"
    out: dict[str, Any] = {
        "name": definition["name"],
        "title": f"{tool.name} {tool.version}",
        "description": description,
        "inputSchema": definition["inputSchema"],
        "annotations": tool_annotations(tool),
        "_meta": {
            meta.TOOL_VERSION: str(tool.version),
            meta.RISK: tool.risk.value,
            meta.DEPRECATED: tool.deprecated,
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
