"""The key that signs checkpoints (Ed25519), and the public keys that verify them.

A checkpoint names its key by ``key_id``: the first 16 hex digits of the SHA-256 of the raw
public key. A verifier needs only public keys: ``toolgate audit public-key`` prints the PEM
of the configured one, and ``audit verify --public-key FILE`` takes one an auditor holds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gateway.b64url import decode as b64_decode
from gateway.b64url import encode as b64_encode
from gateway.errors import ConfigError
from gateway.keyfile import publish_once
from gateway.settings import Settings, make_directory

DEFAULT_KEY = "audit.key"
"""Under var_dir: the signing key made once when none is configured."""


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class Signer:
    private: Ed25519PrivateKey

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def key_id(self) -> str:
        return key_id(self.public)

    def sign(self, data: bytes) -> str:
        return b64_encode(self.private.sign(data))

    def public_pem(self) -> str:
        return public_pem(self.public)


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


class Verifier:
    """The public keys a checkpoint may be signed with, by key id."""

    def __init__(self, keys: list[Ed25519PublicKey]) -> None:
        self.keys = {key_id(k): k for k in keys}

    def verify(self, kid: str, data: bytes, signature: str) -> str | None:
        """None if ``signature`` is ``kid``'s over ``data``; else what is wrong."""
        public = self.keys.get(kid)
        if public is None:
            return f"signed by key {kid}, which is not one of the verifying keys"
        try:
            public.verify(b64_decode(signature), data)
        except (InvalidSignature, ValueError):
            return "its signature does not verify (edited or forged)"
        return None


def key_path(settings: Settings) -> Path:
    configured = settings.audit.signing_key
    if configured is not None:
        return settings.path(configured)
    return settings.path(settings.var_dir) / DEFAULT_KEY


def load_signer(settings: Settings, create: bool = True) -> Signer:
    """The configured signing key; with none configured, ``var/audit.key``, made once."""
    path = key_path(settings)
    if settings.audit.signing_key is None and create and not path.exists():
        make_directory(path.parent, "var_dir")
        _make_key(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"audit.signing_key: cannot read {path}: {exc.strerror}") from exc
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"audit.signing_key: {path} is not an unencrypted PEM private key"
        ) from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise ConfigError(f"audit.signing_key: {path} is not an Ed25519 key")
    return Signer(private)


def check(settings: Settings) -> list[str]:
    """The faults of the configured keys (``audit.signing_key``, ``audit.public_keys``),
    for ``toolgate check``; a key ``var_dir`` would hold is made at start, not here."""
    problems: list[str] = []
    if settings.audit.signing_key is not None:
        try:
            load_signer(settings, create=False)
        except ConfigError as exc:
            problems.extend(exc.problems)
    for path in settings.audit.public_keys:
        try:
            load_public_key(settings.path(path))
        except ConfigError as exc:
            problems.extend(f"audit.public_keys: {problem}" for problem in exc.problems)
    return problems


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the public key: {exc.strerror}") from exc
    try:
        public = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not a PEM public key") from exc
    if not isinstance(public, Ed25519PublicKey):
        raise ConfigError(f"{path}: not an Ed25519 public key")
    return public


def _make_key(path: Path) -> None:
    """A new signing key at ``path``, unless another gateway made one first (``keyfile``)."""
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    publish_once(path, pem)
