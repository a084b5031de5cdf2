"""Stage 1 — resolve: the exact tool version from the catalogue."""

from __future__ import annotations

from gateway.pipeline.records import Requested, Resolved
from gateway.pipeline.services import Services


async def run(services: Services, state: Requested) -> Resolved:
    req = state.ticket.request
    tool = services.catalogue.resolve(req.tool_name, req.requested_version)
    deprecated = tool.deprecated if isinstance(tool.deprecated, str) else bool(tool.deprecated)
    trail = state.trail.emit(
        "tool.resolved",
        name=tool.name,
        version=str(tool.version),
        requested_version=req.requested_version,
        deprecated=deprecated,
    )
    return Resolved(state.ticket, tool, trail)
