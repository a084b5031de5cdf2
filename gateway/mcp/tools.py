"""The catalogue as MCP tools: what ``tools/list`` answers a principal.

A tool is listed when the policy could ever allow the principal to call it, and the policy
says so itself: its listing rule (``data.toolgate.listed``, docs/policies.md) is evaluated once
per tool on a listing input document (the tool, the principal with its roles and credential,
the workspace: no call), and only ``true`` lists. The backend is given the documents of all
the tools at once and answers them within one deadline of its own (the OPA backend: one
``opa_timeout`` for the whole listing, whatever the number of tools). An evaluation error, or
an answer that is undefined, not a boolean or late, leaves the tool out (fail closed), with
one warning per listing. A policy that does not define the rule (one written before it
existed) is asked the old way instead: its decision on a probe call of each tool with no
arguments, ``PROBES_AT_ONCE`` at a time (each with the backend's deadline for a decision), the
tool left out when that is deny. Nothing of the policy's logic is repeated here. The newest
enabled version is listed (a call resolves it too, unless ``_meta`` names another); a
deprecated one says so in its description and in ``_meta``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.declarations.definitions import tool_definition
from gateway.declarations.model import ToolDeclaration
from gateway.errors import PolicyUnavailable
from gateway.mcp import meta
from gateway.pipeline.policy import credential_input, tool_input
from gateway.pipeline.records import sha256_json
from gateway.runtime.container import Runtime
from gateway.types import DecisionResult, Listing, SideEffect

log = logging.getLogger("toolgate.mcp")

PROBES_AT_ONCE = 8
"""The probe calls of one listing asked at a time (a policy without the listing rule)."""

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
        if services.workspaces.get(workspace_id or "") is None:
            return []  # no call could run there: the policy need not be asked
        candidates = listed(services)
        documents = [
            listing_input(services, principal, workspace_id, tool, roles, auth_method)
            for tool in candidates
        ]
        answers = await services.policy.listed(documents)
        if answers is None:  # no listing rule: the probe calls of a policy written before it
            answers = await probed(services, documents)
        problems: dict[str, str] = {}
        for tool, answer in zip(candidates, answers, strict=True):
            if answer.problem is not None:
                problems[tool.name] = answer.problem
            elif answer.listed:
                tools.append(mcp_tool(tool))
    if problems:
        name, cause = next(iter(problems.items()))
        log.warning(
            "tools/list for %r: %d tool(s) left out, the policy's listing rule gave no answer "
            "(%s: %s)",
            principal,
            len(problems),
            name,
            cause,
        )
    return tools


async def probed(services: Runtime, documents: list[dict[str, Any]]) -> list[Listing]:
    """Each tool listed unless the policy denies its probe call: the decisions asked
    ``PROBES_AT_ONCE`` at a time, so that a remote policy's deadlines run side by side."""
    gate = asyncio.Semaphore(PROBES_AT_ONCE)

    async def one(document: dict[str, Any]) -> Listing:
        async with gate:
            try:
                decision = await services.policy.decide(_probe(document))
            except PolicyUnavailable:  # no decision: not listed (the backend logged why)
                return Listing(False)
        return Listing(decision.result is not DecisionResult.DENY)

    return await asyncio.gather(*(one(d) for d in documents))


def listing_input(
    services: Runtime,
    principal: str,
    workspace_id: str | None,
    tool: ToolDeclaration,
    roles: tuple[str, ...] = (),
    auth_method: str = "",
) -> dict[str, Any]:
    """The listing input document (docs/policies.md): the parts of a call's policy input that
    are the same for every call of ``tool`` by ``principal`` in the workspace."""
    workspace = services.workspaces.get(workspace_id or "")
    return {
        "tool": tool_input(tool),
        "actor": {
            "user_id": principal,
            "roles": list(services.roles(principal, roles)),
            "credential": credential_input(auth_method, roles),
        },
        "workspace": {
            "id": workspace_id or "(none)",
            "root": str(workspace.root) if workspace else "",
        },
    }


def probe_input(
    services: Runtime,
    principal: str,
    workspace_id: str | None,
    tool: ToolDeclaration,
    roles: tuple[str, ...] = (),
    auth_method: str = "",
) -> dict[str, Any]:
    """A policy input document (docs/policies.md) for a call of ``tool`` with no arguments:
    what a policy without a listing rule is asked."""
    return _probe(listing_input(services, principal, workspace_id, tool, roles, auth_method))


def _probe(listing: dict[str, Any]) -> dict[str, Any]:
    return {
        **listing,
        "actor": {"agent_id": "", **listing["actor"]},
        "arguments": {},
        "arguments_sha256": sha256_json({}),
        "paths": [],
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
