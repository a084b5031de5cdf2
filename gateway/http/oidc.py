"""Bearer JWTs (OpenID Connect access or ID tokens) → identities.

A token is accepted only when all of these hold (docs/security.md#jwt-bearer-tokens):
its header's ``alg`` is one of ``jwt.algorithms`` (asymmetric only: never ``none``, never
``HS*``) and fits the key's type; its ``kid`` names a key of the provider's JWKS; the
signature verifies; ``iss`` is ``jwt.issuer``; ``aud`` holds this gateway's audience (so a
token minted for another resource is refused); ``exp`` is present and not past, ``nbf`` and
``iat`` not in the future (each within ``jwt.leeway``). The principal and the roles are then
read from the claims as the configuration maps them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jwt

from gateway.errors import Unauthenticated
from gateway.http.jwks import KeySet
from gateway.settings import JwtSettings

_FAMILY = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
_TEXT = re.compile(r"^[^\x00-\x20\x7f-\x9f]{1,128}$")
"""A principal id or a role from a claim: 1-128 printable characters, no space."""
MAX_ROLES = 64
MAX_TOKEN_CHARS = 16 * 1024


class InvalidToken(Unauthenticated):
    code = "invalid_token"


class TokenVerifier:
    """Checks tokens of one provider against its key set."""

    def __init__(self, settings: JwtSettings, keys: KeySet) -> None:
        self.settings = settings
        self.keys = keys

    async def verify(self, token: str) -> dict[str, Any]:
        """The claims of a valid token; InvalidToken (401) says why one is not."""
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidToken("the bearer token is too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken("the bearer token is not a JWT") from exc
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self.settings.algorithms:
            allowed = ", ".join(self.settings.algorithms)
            raise InvalidToken(f"the token's algorithm {alg!r} is not accepted (only {allowed})")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("the token names no key (kid)")
        key = await self.keys.key(kid)
        if key is None:
            raise InvalidToken(f"the token's key {kid[:64]!r} is not one of the provider's keys")
        if _FAMILY.get(alg[:2]) != key.kty or (key.alg is not None and key.alg != alg):
            raise InvalidToken(f"the token's algorithm {alg} does not fit its key {kid[:64]!r}")
        settings = self.settings
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=settings.expected_audience,
                issuer=settings.issuer,
                leeway=settings.leeway,
                options={"require": ["exp", "iss", "aud"], "verify_sub": False},
            )
        except jwt.ExpiredSignatureError as exc:
            raise InvalidToken("the token has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise InvalidToken("the token is not valid yet (nbf or iat)") from exc
        except jwt.InvalidAudienceError as exc:
            raise InvalidToken(
                f"the token is not for this resource (its audience must be "
                f"{settings.expected_audience})"
            ) from exc
        except jwt.InvalidIssuerError as exc:
            raise InvalidToken(f"the token is not issued by {settings.issuer}") from exc
        except jwt.InvalidSignatureError as exc:
            raise InvalidToken("the token's signature does not verify") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise InvalidToken(f"the token lacks the claim {exc.claim!r}") from exc
        except jwt.PyJWTError as exc:
            raise InvalidToken("the bearer token is not valid") from exc
        return claims

    def principal(self, claims: Mapping[str, Any]) -> str:
        value = claim(claims, self.settings.principal_claim)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        name = f"{self.settings.principal_prefix}{value}" if isinstance(value, str) else None
        if name is None or not _TEXT.match(name):
            raise InvalidToken(
                f"the token's {self.settings.principal_claim!r} claim is no usable principal id "
                "(1-128 printable characters)"
            )
        return name

    def roles(self, claims: Mapping[str, Any]) -> tuple[str, ...]:
        """The gateway roles the token's roles claim grants, through ``role_map``."""
        path = self.settings.roles_claim
        if path is None:
            return ()
        value = claim(claims, path)
        if isinstance(value, str):
            value = value.split()
        if value is None:
            return ()
        if not isinstance(value, list):
            raise InvalidToken(f"the token's {path!r} claim is not a list of roles")
        mapped: list[str] = []
        for role in value[: MAX_ROLES * 4]:
            if not isinstance(role, str):
                continue
            if role in self.settings.role_map:
                mapped.extend(self.settings.role_map[role])
            elif self.settings.keep_unmapped_roles and _TEXT.match(role):
                mapped.append(role)
        return tuple(dict.fromkeys(mapped))[:MAX_ROLES]


def claim(claims: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of the claims (None where it is missing). A claim whose
    own name holds a dot (``https://example.com/roles``) is found under its full name first."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value
