"""Signing as the Standard Webhooks specification does it (https://www.standardwebhooks.com/).

The secret is ``whsec_`` + base64 of the key; the signature of one attempt is
``v1,`` + base64(HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}")), sent in
``webhook-signature`` beside ``webhook-id`` (the same on every attempt: the receiver's replay
protection) and ``webhook-timestamp`` (Unix seconds of this attempt).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

PREFIX = "whsec_"


def parse_secret(text: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret; ValueError (never naming the secret)
    when it is not one."""
    if not text.startswith(PREFIX):
        raise ValueError("a signing secret is whsec_ followed by base64")
    try:
        key = base64.b64decode(text[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("the signing secret after whsec_ is not valid base64") from exc
    if len(key) < 24:
        raise ValueError("the signing secret is too short: at least 24 bytes (32 advised)")
    return key


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one attempt."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def headers(key: bytes, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of one attempt."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(key, msg_id, timestamp, body),
    }
