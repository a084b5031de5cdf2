"""The catalogue as a principal may see it: what ``GET /v1/tools`` (every format), MCP
``tools/list`` and the kit's tool adapters list, asked of the policy once, here.

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
enabled version is listed (a call resolves it too, unless it names another).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.declarations.model import ToolDeclaration
from gateway.errors import PolicyUnavailable
from gateway.pipeline.policy import credential_input, tool_input
from gateway.pipeline.records import sha256_json
from gateway.runtime.container import Runtime
from gateway.types import DecisionResult, Listing

log = logging.getLogger("toolgate.listing")

PROBES_AT_ONCE = 8
"""The probe calls of one listing asked at a time (a policy without the listing rule)."""


def candidates(services: Runtime, only: str | None = None) -> list[ToolDeclaration]:
    """The newest enabled version of every tool, or of the tool named ``only`` (a tool with
    none enabled is not listed: no call could use it)."""
    catalogue = services.catalogue
    out = []
    for name in catalogue.names if only is None else (only,):
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
    only: str | None = None,
) -> list[ToolDeclaration]:
    """The tools ``principal`` (authenticated by ``auth_method``, its credential
    holding ``roles``) may see for calls in ``workspace_id``, in catalogue order (all of one
    generation of the runtime, held while the policy is asked); ``only``: of that one tool.

    A listing asks the policy about every tool, so it is bounded like a call
    (``admission.listings``: per principal and for everyone; ``LimitExceeded`` beyond)."""
    with services.admission.listings.hold(principal), services.lease() as services:
        if services.workspaces.get(workspace_id or "") is None:
            return []  # no call could run there: the policy need not be asked
        return await _asked(services, principal, workspace_id, roles, auth_method, only)


async def _asked(
    services: Runtime,
    principal: str,
    workspace_id: str | None,
    roles: tuple[str, ...],
    auth_method: str,
    only: str | None,
) -> list[ToolDeclaration]:
    offered = candidates(services, only)
    documents = [
        listing_input(services, principal, workspace_id, tool, roles, auth_method)
        for tool in offered
    ]
    answers = await services.policy.listed(documents)
    if answers is None:  # no listing rule: the probe calls of a policy written before it
        answers = await probed(services, documents)
    tools, problems = [], {}
    for tool, answer in zip(offered, answers, strict=True):
        if answer.problem is not None:
            problems[tool.name] = answer.problem
        elif answer.listed:
            tools.append(tool)
    if problems:
        name, cause = next(iter(problems.items()))
        log.warning(
            "the listing for %r: %d tool(s) left out, the policy's listing rule gave no answer "
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
                decision = await services.policy.decide(probe(document))
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


def probe(listing: dict[str, Any]) -> dict[str, Any]:
    """The policy input (docs/policies.md) of a call with no arguments of the tool of the
    listing input ``listing``: what a policy without a listing rule is asked."""
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
