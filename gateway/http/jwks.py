"""The identity provider's signing keys (a JWKS document, RFC 7517), from a file or a URL.

The set is cached. It is read again when it is older than ``jwks_max_age`` (the provider
rotates its keys) or when a token names a key id the set does not hold (a new key appeared),
but never more than once per ``jwks_min_refetch``: a flood of tokens with made-up key ids
costs the provider one fetch per interval, and each such token is refused. A failed fetch
keeps the keys already held; with none held, the token cannot be checked (503).

Only asymmetric signing keys are kept (``kty`` RSA, EC or OKP; ``use`` absent or ``sig``;
a ``kid``): a symmetric (``oct``) key in the set is ignored, so a token can never be checked
with a secret anyone can read.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import jwt

from gateway.errors import ToolgateError

log = logging.getLogger("toolgate.auth")
MAX_JWKS_BYTES = 512 * 1024
_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})


class JwksUnavailable(ToolgateError):
    """The provider's keys could not be read and none are held."""

    code = "jwks_unavailable"
    http_status = 503
    retryable = True


@dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    kty: str
    alg: str | None
    """The ``alg`` the JWK declares, if it does: then only that one is accepted with it."""
    key: Any
    """The public key (a ``cryptography`` object)."""


def parse_jwks(data: Any) -> dict[str, SigningKey]:
    """The usable signing keys of a JWKS document, by key id; ValueError if it is no JWKS."""
    if not isinstance(data, Mapping) or not isinstance(data.get("keys"), list):
        raise ValueError('a JWKS is a JSON object with a "keys" list')
    found: dict[str, SigningKey] = {}
    for jwk in data["keys"]:
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str):
            continue
        if jwk.get("kty") not in _KEY_TYPES or jwk.get("use", "sig") != "sig":
            continue
        try:
            parsed = jwt.PyJWK(jwk)
        except jwt.PyJWTError:
            continue
        alg = jwk.get("alg") if isinstance(jwk.get("alg"), str) else None
        found[jwk["kid"]] = SigningKey(jwk["kid"], jwk["kty"], alg, parsed.key)
    return found


class KeySet:
    """The cached JWKS of one provider (``jwks_file`` or ``jwks_url``)."""

    def __init__(
        self,
        *,
        file: Path | None = None,
        url: str | None = None,
        max_age: float = 600.0,
        min_refetch: float = 30.0,
        timeout: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (file is None) == (url is None):
            raise ValueError("a key set reads one file or one URL")
        self._file, self._url = file, url
        self._max_age, self._min_refetch, self._timeout = max_age, min_refetch, timeout
        self._clock = clock
        self._keys: dict[str, SigningKey] = {}
        self._fetched_at = -math.inf
        self._attempted_at = -math.inf
        self._lock = anyio.Lock()

    @property
    def source(self) -> str:
        return str(self._file or self._url)

    async def key(self, kid: str) -> SigningKey | None:
        """The key ``kid``, fetching the set again when it is stale or lacks ``kid`` (at
        most once per ``min_refetch``); None if the provider has no such key."""
        now = self._clock()
        held = self._keys.get(kid)
        if held is not None and now - self._fetched_at < self._max_age:
            return held
        if now - self._attempted_at >= self._min_refetch:
            await self._refresh()
        elif not self._keys and self._fetched_at == -math.inf:
            raise JwksUnavailable(f"the identity provider's keys ({self.source}) are not read yet")
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        async with self._lock:
            if self._clock() - self._attempted_at < self._min_refetch:
                return  # another request fetched while this one waited
            self._attempted_at = self._clock()
            try:
                keys = parse_jwks(await self._read())
            except (OSError, ValueError, httpx.HTTPError) as exc:
                log.warning("cannot read the JWKS at %s: %s", self.source, exc)
                if not self._keys:
                    raise JwksUnavailable(
                        f"the identity provider's keys ({self.source}) cannot be read"
                    ) from exc
                return
            self._keys, self._fetched_at = keys, self._clock()

    async def _read(self) -> Any:
        if self._file is not None:
            text = await anyio.Path(self._file).read_bytes()
        else:
            assert self._url is not None
            async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as client:
                response = await client.get(self._url, headers={"Accept": "application/json"})
                response.raise_for_status()
                text = response.content
        if len(text) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
        return json.loads(text)
