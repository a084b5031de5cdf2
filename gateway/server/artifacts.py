"""``GET /v1/artifacts/{id}``: evidence files (screenshots) for the principal that made them.

An artifact is served only to the principal whose call stored it; to anyone else, and for
an unknown id, the answer is the same 404, so ids cannot be probed.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.http.artifacts import artifact_response
from gateway.server.routes import principal_of, services_of


async def get_artifact(request: Request) -> Response:
    """The artifact's bytes, with its sha256 as the ETag (``gateway.http.artifacts``)."""
    principal = principal_of(request)
    settings = services_of(request).settings
    artifact_id = request.path_params["artifact_id"]
    return await artifact_response(settings, artifact_id, principal, "no such artifact")
