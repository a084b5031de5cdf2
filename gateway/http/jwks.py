"""The identity provider's signing keys (a JWKS document, RFC 7517), from a file or a URL.

The set is cached. It is read again when it is older than ``jwks_max_age`` (the provider
rotates its keys) or when a token names a key id the set does not hold (a new key appeared),
but never more than once per ``jwks_min_refetch``: a flood of tokens with made-up key ids
costs the provider one fetch per interval, and each such token is refused. A failed fetch
keeps the keys already held; with none held, the token cannot be checked (503).

One fetch at a time, bounded as a whole by ``timeout`` (connecting, the answer and its
body: a server that drips its answer cannot hold it longer). While it runs, a token whose
key is held is checked with the set held, stale or not; only a token that needs a key the
set lacks waits for it. The URL is read as configured: a redirect is a failed fetch, never
followed, and a body over ``MAX_JWKS_BYTES`` is refused as soon as it is known to be
(from its ``Content-Length``, or when the read passes the limit), not read to its end.
The fetch goes through the server's one HTTP client (``gateway.adapters.shared.client``:
certificates checked against the machine's trust store, ``system_trust``, as for every
endpoint of the operator's; its checked connect, with every network allowed but the cloud
metadata endpoints, since the URL is the operator's).

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
import jwt

from gateway.adapters.shared import client as http
from gateway.adapters.shared.urls import parse_url
from gateway.errors import ToolgateError
from gateway.settings import Settings

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


def check_file(settings: Settings) -> list[str]:
    """The fault of ``jwt.jwks_file`` as the gateway would first read it (``toolgate check``,
    and ``serve`` before it starts): missing, unreadable, too large or not a JWKS."""
    if settings.jwt is None or settings.jwt.jwks_file is None:
        return []
    path = settings.path(settings.jwt.jwks_file)
    try:
        parse_jwks(_document(path.read_bytes()))
    except OSError as exc:
        return [f"jwt.jwks_file: cannot read {path}: {exc.strerror}"]
    except (ValueError, RecursionError) as exc:
        return [f"jwt.jwks_file: {path} is not a JWKS document: {exc}"]
    return []


def _document(data: bytes) -> Any:
    """A JWKS file's bytes as JSON, refused past ``MAX_JWKS_BYTES`` (ValueError)."""
    if len(data) > MAX_JWKS_BYTES:
        raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
    return json.loads(data)


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
        held = self._keys.get(kid)
        if held is not None and (self._lock.locked() or not self._stale()):
            return held  # a fetch in flight is not waited for by a key the set holds
        if self._lock.locked() or self._clock() - self._attempted_at >= self._min_refetch:
            await self._refresh()
        if self._fetched_at == -math.inf:
            raise JwksUnavailable(f"the identity provider's keys ({self.source}) cannot be read")
        return self._keys.get(kid)

    def _stale(self) -> bool:
        return self._clock() - self._fetched_at >= self._max_age

    async def _refresh(self) -> None:
        """Fetch the set, or wait for the fetch in flight and take its outcome: one wait,
        never two fetches in a row (each bounded by ``timeout``)."""
        if self._lock.locked():
            async with self._lock:
                return
        async with self._lock:
            if self._clock() - self._attempted_at < self._min_refetch:
                return  # another request fetched while this one waited
            self._attempted_at = self._clock()
            try:
                keys = parse_jwks(await self._read())
            except (OSError, ValueError, http.Unreachable, http.Lost, ToolgateError) as exc:
                log.warning("cannot read the JWKS at %s: %s", self.source, exc)
                return
            self._keys, self._fetched_at = keys, self._clock()

    async def _read(self) -> Any:
        if self._file is not None:
            return _document(await anyio.Path(self._file).read_bytes())
        try:
            with anyio.fail_after(self._timeout):
                return json.loads(await self._download())
        except TimeoutError as exc:
            raise TimeoutError(
                f"the fetch did not finish within {self._timeout:g} s (jwt.jwks_timeout)"
            ) from exc

    async def _download(self) -> bytes:
        """The body of the URL's answer: only a 2xx, unencoded, at most ``MAX_JWKS_BYTES``
        (a compressed body would be inflated before its size could be checked)."""
        assert self._url is not None
        headers = [("Accept", "application/json"), ("Accept-Encoding", "identity")]
        attempt = http.Attempt(retry_safe=True)
        client = http.Client(ssl_context=http.system_trust(), limit=1)
        try:
            url = parse_url(self._url)
            async with client.open(attempt, http.ANY_NETWORK, "GET", url, headers, None) as answer:
                _check_answer(answer.status, answer.headers)
                truncated, problem = await http.read_body(answer, MAX_JWKS_BYTES + 1, attempt.body)
        finally:
            await client.aclose()
        if len(attempt.body) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
        if truncated:
            raise ValueError(problem or "the answer was cut short")
        return bytes(attempt.body)


def _check_answer(status: int, headers: Mapping[str, str]) -> None:
    """Refuse an answer that is not a 2xx JWKS sent whole and unencoded, before its body."""
    if 300 <= status < 400:
        raise ValueError(
            f"it answered {status}, a redirect, which is not followed "
            "(the keys are read from jwt.jwks_url only)"
        )
    if not 200 <= status < 300:
        raise ValueError(f"it answered {status}")
    encoding = headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        raise ValueError(f"the JWKS came encoded ({encoding[:32]}), not as asked")
    declared = headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > MAX_JWKS_BYTES:
        raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes ({declared})")
