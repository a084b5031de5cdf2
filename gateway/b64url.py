"""Unpadded URL-safe base64 (RFC 4648 §5), as signed tokens, cookies and bundles carry it."""

from __future__ import annotations

import base64


def encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def decode(text: str) -> bytes:
    """The bytes of ``text``, padded back; ValueError if malformed or not in the one
    canonical spelling ``encode`` gives. The stdlib decoder skips characters outside the
    alphabet, accepts padding and ignores a last character's spare bits, so ``"\\x00" +
    token`` or ``token + "="`` would decode to the same bytes: a signed token (approval,
    session, bundle) has exactly one accepted spelling."""
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if encode(data) != text:
        raise ValueError("not canonical unpadded URL-safe base64")
    return data
