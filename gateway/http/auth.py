"""Bearer API keys → principals. Keys are compared by their sha256, never stored plain."""

from __future__ import annotations

from starlette.requests import Request

from gateway.errors import Unauthenticated
from gateway.settings import Settings


def authenticate(request: Request, settings: Settings) -> str:
    """The principal id of the request's bearer key; Unauthenticated otherwise."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if not header:
        raise Unauthenticated("missing Authorization: Bearer <api key>", code="missing_api_key")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthenticated("use Authorization: Bearer <api key>", code="bad_authorization")
    principal = settings.principal_for_key(key.strip())
    if principal is None:
        raise Unauthenticated("the API key is not valid", code="invalid_api_key")
    return principal.id
