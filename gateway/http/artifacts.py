"""Serving an artifact (a screenshot a call stored) over HTTP, for every door that shows one.

An artifact is served only to the principal whose call stored it; to anyone else, and for
an unknown id, the answer is the same 404, so ids cannot be probed. The bytes go out with
their sha256 as the ETag, private caching, and no sniffing or active content.
"""

from __future__ import annotations

import anyio
from starlette.responses import Response

from gateway.adapters.shared.artifacts import ArtifactStore
from gateway.errors import NotFound
from gateway.settings import Settings


async def artifact_response(
    settings: Settings, artifact_id: str, principal: str, not_found: str
) -> Response:
    """The artifact ``artifact_id`` for ``principal``; else ``NotFound(not_found)``."""
    store = ArtifactStore.of(settings)
    found = await anyio.to_thread.run_sync(store.load, artifact_id)
    if found is None or found[0].owner != principal:
        raise NotFound(not_found, code="artifact_not_found")
    artifact, data = found
    headers = {
        "ETag": f'"{artifact.sha256}"',
        "Cache-Control": "private, max-age=3600",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'",
    }
    return Response(data, media_type=artifact.content_type, headers=headers)
