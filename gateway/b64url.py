"""Unpadded URL-safe base64 (RFC 4648 §5), as signed tokens, cookies and bundles carry it."""

from __future__ import annotations

import base64


def encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def decode(text: str) -> bytes:
    """The bytes of ``text``, padded back; ``binascii.Error`` (a ValueError) if malformed."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
