"""The idempotency key of a call named by its run and call ids: one definition, which the
kit (``toolkit.with_call_id``) and the MCP door (``gateway.mcp.meta``) both derive keys with,
so that the two doors key the same call the same way. It lives in the kit because the kit
imports nothing of the gateway's other rooms, and every room may import it."""

from __future__ import annotations

import hashlib

MAX_KEY_LENGTH = 256
"""The longest idempotency key the gateway takes (docs/api.md#request-body: the request's
ids, ``gateway.pipeline.request.MAX_ID_LENGTH``; tests/client/test_keys.py checks they agree)."""


def call_key(run_id: object, call_id: object) -> str:
    """``<run_id>/<call_id>``, so that a retry of the same call (the same ids) is the same
    keyed call; ids too long to make a key together (past ``MAX_KEY_LENGTH``) make it of
    their digest, ``sha256:<hex>``."""
    key = f"{run_id}/{call_id}"
    if len(key) <= MAX_KEY_LENGTH:
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
