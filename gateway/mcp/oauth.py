"""``/mcp`` as an OAuth 2.0 protected resource (RFC 9728, the MCP authorization spec).

With ``jwt`` configured, the gateway publishes its resource metadata at
``/.well-known/oauth-protected-resource`` with the resource's path appended (RFC 9728 §3.1:
``/.well-known/oauth-protected-resource/mcp``) and at the bare well-known path (which older
MCP clients ask), and every 401 of ``/mcp`` points at it with
``WWW-Authenticate: Bearer resource_metadata="..."``. The document is public: a client reads
it before it has a token. Everything in it comes from the configuration, never the request.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.http.problems import problem
from gateway.settings import JwtSettings

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def metadata_url(resource: str) -> str:
    """Where the metadata of ``resource`` is: the well-known path between its host and path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{path}"


def metadata(jwt: JwtSettings) -> dict[str, Any]:
    document: dict[str, Any] = {
        "resource": jwt.resource,
        "authorization_servers": list(jwt.authorization_servers or (jwt.issuer,)),
        "bearer_methods_supported": ["header"],
        "resource_signing_alg_values_supported": list(jwt.algorithms),
        "resource_name": "Toolgate",
        "resource_documentation": "https://toolgate.dev/docs/mcp#oauth",
    }
    if jwt.scopes_supported:
        document["scopes_supported"] = list(jwt.scopes_supported)
    return document


def challenge(jwt: JwtSettings, error: str | None) -> str:
    """The ``WWW-Authenticate`` value of a 401 at ``/mcp`` (RFC 6750 §3, RFC 9728 §5.1):
    ``error="invalid_token"`` when a credential was sent and refused."""
    parts = ['Bearer realm="toolgate"', f'resource_metadata="{metadata_url(jwt.resource)}"']
    if error is not None:
        parts.append(f'error="{error}"')
    if jwt.scopes_supported:
        parts.append(f'scope="{" ".join(jwt.scopes_supported)}"')
    return ", ".join(parts)


async def protected_resource(request: Request) -> Response:
    """``GET /.well-known/oauth-protected-resource[/mcp]``: the metadata, or 404 when the
    gateway takes no JWTs."""
    jwt = request.app.state.services.settings.jwt
    if jwt is None:
        return problem(404, "not_found", "this gateway takes no OAuth tokens (jwt is not set)")
    suffix = request.url.path.removeprefix(WELL_KNOWN)
    if suffix not in ("", urlsplit(jwt.resource).path.rstrip("/")):
        return problem(404, "not_found", "no protected resource at this path")
    return JSONResponse(metadata(jwt), headers={"Cache-Control": "public, max-age=300"})
