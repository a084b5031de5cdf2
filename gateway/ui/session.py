"""The page's sign-in: a signed session cookie and the CSRF token bound to it.

A session is ``base64url(JSON {principal, expires_ms, csrf, method, credential, id}) "."
base64url(HMAC-SHA256)``,
signed with a key derived from the approval key (so every replica sharing that key accepts
it). Its random ``id`` is what sign-out ends: written to the store's ``ended_sessions``, it
ends every copy of the cookie on every replica (``gateway/ui/pages.py`` reads it for each
page). The CSRF token travels inside the signed session and in each form; a form whose token
is not the session's is refused. Before sign-in, the sign-in form is protected the
double-submit way: a random token in a short-lived cookie and in the form.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from gateway import b64url

SESSION_COOKIE = "tg_session"
SIGNIN_COOKIE = "tg_signin"


def session_key(approval_key: bytes) -> bytes:
    """The HMAC key of session cookies, derived from (never equal to) the approval key."""
    return hmac.new(approval_key, b"toolgate ui session v1", hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Session:
    principal: str
    expires_ms: int
    csrf: str
    method: str = "api_key"
    """How the person signed in: ``api_key`` or ``jwt`` (gateway/http/auth.py)."""
    credential: str = ""
    """The API key's id (checked again on every page: an expired or revoked key ends the
    session), or the token's ``jti``."""
    id: str = ""
    """Random, this session's own: sign-out ends it in the store (``Store.end_session``)."""


def issue(
    principal: str,
    ttl_s: float,
    key: bytes,
    method: str = "api_key",
    credential: str = "",
    not_after_ms: int | None = None,
) -> tuple[Session, str]:
    """A new session for ``principal`` and its cookie value; it ends after ``ttl_s`` or at
    ``not_after_ms`` (the credential's own expiry), whichever is first."""
    expires = int((time.time() + ttl_s) * 1000)
    if not_after_ms is not None:
        expires = min(expires, not_after_ms)
    session = Session(
        principal, expires, secrets.token_urlsafe(24), method, credential, secrets.token_urlsafe(18)
    )
    body = json.dumps(
        {
            "p": session.principal,
            "e": session.expires_ms,
            "c": session.csrf,
            "m": session.method,
            "k": session.credential,
            "s": session.id,
        },
        separators=(",", ":"),
    ).encode("utf-8")
    payload = b64url.encode(body)
    signature = b64url.encode(hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest())
    return session, f"{payload}.{signature}"


def read(value: str | None, key: bytes) -> Session | None:
    """The session of a cookie value; None if it is missing, forged, malformed or expired."""
    if not value or value.count(".") != 1 or len(value) > 4096:
        return None
    payload, signature = value.split(".")
    expected = b64url.encode(
        hmac.new(key, payload.encode("ascii", "replace"), hashlib.sha256).digest()
    )
    if not hmac.compare_digest(expected, signature):
        return None
    try:
        data = json.loads(b64url.decode(payload))
        session = Session(
            str(data["p"]),
            int(data["e"]),
            str(data["c"]),
            str(data["m"]),
            str(data["k"]),
            str(data["s"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
    if session.expires_ms <= time.time() * 1000:
        return None
    return session


def same_token(expected: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(expected.encode(), str(given).encode())
