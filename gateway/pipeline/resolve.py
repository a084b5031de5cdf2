"""Stage 1 — resolve: the exact tool version from the catalogue."""

from __future__ import annotations

from gateway.pipeline.records import Flow
from gateway.pipeline.services import Services


async def run(services: Services, flow: Flow) -> Flow:
    req = flow.request
    tool = services.catalogue.resolve(req.tool_name, req.requested_version)
    deprecated = tool.deprecated if isinstance(tool.deprecated, str) else bool(tool.deprecated)
    return flow.but_emit(
        {"tool": tool},
        "tool.resolved",
        name=tool.name,
        version=str(tool.version),
        requested_version=req.requested_version,
        deprecated=deprecated,
    )
