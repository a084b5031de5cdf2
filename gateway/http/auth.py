"""Who is calling: a bearer credential → an :class:`Identity` (docs/security.md#identities).

Two kinds of credential, one header (``Authorization: Bearer ...``):

- an **API key** of ``principals`` (compared by its sha256, never stored in the clear): refused
  once past its ``expires``, or when its key id is in the store's ``revoked_keys`` (read for
  every request, by a read that begins after it arrives, so a revocation holds on every
  replica as soon as it commits);
- a **JWT** from the OpenID Connect provider of ``jwt`` (gateway/http/oidc.py): the principal
  and the roles come from its claims.

:class:`AuthMiddleware` authenticates every HTTP request that carries the header, once, and
leaves the outcome (the identity, or the error that refused the credential) in the request
scope; a handler that needs a caller asks :func:`identity_of` / :func:`principal_of`, which
raise the error (or ``missing_api_key``). Nothing else reads the header.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import ToolgateError, Unauthenticated
from gateway.settings import ApiKey, Settings, hash_key
from gateway.store.store import Store

if TYPE_CHECKING:  # PyJWT (and the HTTP client) load only where JWTs are configured
    from gateway.http.oidc import TokenVerifier

IDENTITY_SCOPE_KEY = "toolgate.identity"


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller. ``principal`` is what everything downstream keys on (the
    executions' owner, quotas, limits); ``roles`` are those the credential itself carries
    (a JWT's mapped claims), added to the policy data's roles of the principal."""

    principal: str
    roles: tuple[str, ...] = ()
    method: str = "api_key"
    """``api_key`` or ``jwt``."""
    credential_id: str = ""
    """The API key's id, or the token's ``jti`` (empty if it has none)."""
    expires_ms: int | None = None
    """When the credential stops being accepted (None: never)."""


def looks_like_jwt(credential: str) -> bool:
    """A compact JWS (three base64url parts); an API key never has two dots."""
    return credential.count(".") == 2 and credential.startswith("ey")


class Authenticator:
    """Turns a bearer credential into an identity, for every door alike."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._keys: dict[str, tuple[str, ApiKey]] = {
            key.sha256: (principal.id, key)
            for principal in settings.principals
            for key in principal.all_keys
        }
        self.tokens: TokenVerifier | None = None
        if settings.jwt is not None:
            from gateway.http.jwks import KeySet
            from gateway.http.oidc import TokenVerifier

            jwt = settings.jwt
            keyset = KeySet(
                file=settings.path(jwt.jwks_file) if jwt.jwks_file is not None else None,
                url=jwt.jwks_url,
                max_age=jwt.jwks_max_age,
                min_refetch=jwt.jwks_min_refetch,
                timeout=jwt.jwks_timeout,
            )
            self.tokens = TokenVerifier(jwt, keyset)

    def key_of(self, principal: str, key_id: str) -> ApiKey | None:
        """The configured key ``key_id`` of ``principal``, if there is one."""
        for owner, key in self._keys.values():
            if owner == principal and key.id == key_id:
                return key
        return None

    def authenticate(self, header: str, store: Store) -> Awaitable[Identity]:
        """The identity of an ``Authorization`` header's value; Unauthenticated otherwise
        (raised at once for a header that is no bearer credential, else when awaited). Not a
        coroutine of its own around :meth:`credential`: this runs on every request."""
        scheme, _, credential = header.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise Unauthenticated("use Authorization: Bearer <api key>", code="bad_authorization")
        return self.credential(credential, store)

    async def credential(self, credential: str, store: Store) -> Identity:
        """The identity of a bare credential (an API key or a JWT: the sign-in form's)."""
        if self.tokens is not None and looks_like_jwt(credential):
            return await self._token(self.tokens, credential)
        found = self._keys.get(hash_key(credential))
        if found is None:
            raise Unauthenticated("the API key is not valid", code="invalid_api_key")
        principal, key = found
        await self.check_key(key, store)
        return Identity(principal, (), "api_key", key.id, key.expires_ms)

    async def check_key(self, key: ApiKey, store: Store) -> None:
        """Refuse ``key`` if it has expired or is revoked."""
        expires = key.expires_ms
        if expires is not None and expires <= time.time() * 1000:
            raise Unauthenticated(f"the API key {key.id!r} has expired", code="api_key_expired")
        if self.settings.revocation_check and await store.is_revoked(key.id):
            raise Unauthenticated(f"the API key {key.id!r} was revoked", code="api_key_revoked")

    async def _token(self, tokens: TokenVerifier, token: str) -> Identity:
        claims = await tokens.verify(token)
        jti = claims.get("jti")
        exp = claims.get("exp")
        return Identity(
            tokens.principal(claims),
            tokens.roles(claims),
            "jwt",
            jti if isinstance(jti, str) else "",
            int(exp * 1000) if isinstance(exp, int | float) else None,
        )


class AuthMiddleware:
    """Authenticates each HTTP request that carries ``Authorization``, once, before any
    handler runs; the outcome waits in the scope for the handler that needs it."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            outcome: Identity | ToolgateError | None = None
            try:
                header = _header(scope)
                if header:  # an empty header is a missing one
                    store = scope["app"].state.services.store
                    outcome = await self.authenticator.authenticate(header, store)
            except ToolgateError as exc:
                outcome = exc
            if outcome is not None:
                scope[IDENTITY_SCOPE_KEY] = outcome
        await self.app(scope, receive, send)


def _header(scope: Scope) -> str | None:
    """The ``Authorization`` header's value; :class:`Unauthenticated` when it comes more than
    once (which one would count is anyone's guess: a proxy or a log may read another)."""
    found: str | None = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            if found is not None:
                raise Unauthenticated(
                    "send one Authorization header, not several", code="bad_authorization"
                )
            found = value.decode("latin-1")
    return found


def identity_of(connection: HTTPConnection) -> Identity:
    """The request's authenticated caller; raises why there is none (401, or 503 when the
    identity provider's keys or the store cannot be read)."""
    outcome = connection.scope.get(IDENTITY_SCOPE_KEY)
    if isinstance(outcome, Identity):
        return outcome
    if isinstance(outcome, ToolgateError):
        raise outcome
    raise Unauthenticated("missing Authorization: Bearer <api key>", code="missing_api_key")


def principal_of(connection: HTTPConnection) -> str:
    """The principal id of the request's caller (see :func:`identity_of`)."""
    return identity_of(connection).principal
