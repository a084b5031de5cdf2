"""Signed approval tokens: HMAC-SHA256 over what the approval binds.

A token binds the approval id, tool name, resolved version, normalised-arguments sha256,
actor, workspace and expiry. It is ``base64url(payload) "." base64url(mac)``; the payload
is canonical JSON. Single use is enforced by the store, not by the token. The claims are
never trusted alone: spending a token checks the stored approval it names against the call
in hand (``check_binding`` of ``claims_for`` the stored record), so a token re-signed with a
stolen key gains nothing the stored approval does not already grant (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import asdict, dataclass

from gateway import b64url
from gateway.errors import PolicyDenied
from gateway.store.records import ApprovalRecord


@dataclass(frozen=True, slots=True)
class TokenClaims:
    approval_id: str
    tool: str
    version: str
    arguments_sha256: str
    actor: str
    workspace: str
    expires_ms: int


def sign(claims: TokenClaims, key: bytes) -> str:
    payload = json.dumps(asdict(claims), sort_keys=True, separators=(",", ":")).encode()
    mac = hmac.new(key, payload, hashlib.sha256).digest()
    return f"{b64url.encode(payload)}.{b64url.encode(mac)}"


def _refuse(why: str) -> PolicyDenied:
    return PolicyDenied(f"approval_token refused: {why}", code="approval_token_invalid")


def verify(token: str, key: bytes) -> TokenClaims:
    """The claims of an authentic, unexpired token; PolicyDenied otherwise."""
    try:
        payload_text, mac_text = token.split(".", 1)
        payload, mac = b64url.decode(payload_text), b64url.decode(mac_text)
    except ValueError as exc:
        raise _refuse("it is not a token issued by this gateway") from exc
    expected = hmac.new(key, payload, hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        raise _refuse("its signature does not match (tampered or from another gateway)")
    try:
        claims = TokenClaims(**json.loads(payload))
    except (TypeError, ValueError, RecursionError) as exc:
        raise _refuse("its payload is malformed") from exc
    if not _well_typed(claims):
        raise _refuse("its payload is malformed")
    if claims.expires_ms <= time.time() * 1000:
        raise _refuse("it has expired; ask for a new approval")
    return claims


def _well_typed(claims: TokenClaims) -> bool:
    c = claims
    texts = (c.approval_id, c.tool, c.version, c.arguments_sha256, c.actor, c.workspace)
    return all(isinstance(t, str) for t in texts) and type(c.expires_ms) is int


def claims_for(approval: ApprovalRecord) -> TokenClaims:
    """What a token for ``approval`` binds: exactly what the stored approval binds."""
    return TokenClaims(
        approval_id=approval.id,
        tool=approval.tool_name,
        version=approval.tool_version,
        arguments_sha256=approval.arguments_sha256,
        actor=approval.principal,
        workspace=approval.workspace_id,
        expires_ms=approval.expires_ms,
    )


def check_binding(claims: TokenClaims, **actual: str) -> None:
    """Refuse a token used for another tool, version, arguments, actor or workspace."""
    names = {
        "tool": "another tool",
        "version": "another tool version",
        "arguments_sha256": "other arguments",
        "actor": "another actor",
        "workspace": "another workspace",
    }
    for field, what in names.items():
        if getattr(claims, field) != actual[field]:
            raise _refuse(f"it was issued for {what} than this call")
