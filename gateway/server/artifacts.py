"""``GET /v1/artifacts/{id}``: evidence files (screenshots) for the principal that made them.

An artifact is served only to the principal whose call stored it; to anyone else, and for
an unknown id, the answer is the same 404, so ids cannot be probed.
"""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import Response

from gateway.adapters.shared.artifacts import ArtifactStore
from gateway.errors import NotFound
from gateway.server.routes import principal_of, services_of


async def get_artifact(request: Request) -> Response:
    """The artifact's bytes, with its sha256 as the ETag."""
    principal = principal_of(request)
    store = ArtifactStore.of(services_of(request).settings)
    found = await anyio.to_thread.run_sync(store.load, request.path_params["artifact_id"])
    if found is None or found[0].owner != principal:
        raise NotFound("no such artifact", code="artifact_not_found")
    artifact, data = found
    headers = {
        "ETag": f'"{artifact.sha256}"',
        "Cache-Control": "private, max-age=3600",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'",
    }
    return Response(data, media_type=artifact.content_type, headers=headers)
