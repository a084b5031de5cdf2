"""The request body a ``tools/call`` makes of its ``_meta`` (gateway/mcp/meta.py): the
idempotency key of a call named stably, and none for a call nothing names."""

from __future__ import annotations

from typing import Any

from gateway.errors import MalformedRequest
from gateway.mcp import meta
from gateway.pipeline.request import MAX_ID_LENGTH, parse_request


def _body(session_id: str | None, **sent: Any) -> dict[str, Any]:
    origin = meta.CallOrigin("alice", session_id, 7, "client", "demo")
    return meta.execution_body("fs.delete_file", {"path": "a"}, sent, origin)


def test_a_named_call_is_keyed_by_its_run_and_call() -> None:
    named = _body(None, **{meta.CALL_ID: "c1"})
    assert named["idempotency_key"] == f"{meta.STATELESS_RUN}/c1"
    both = _body(None, **{meta.RUN_ID: "r1", meta.CALL_ID: "c1"})
    assert both["idempotency_key"] == "r1/c1"
    session = _body("s1")
    assert session["idempotency_key"] == f"mcp-s1/{session['call_id']}"
    assert _body("s1") == session  # the same request sent again: the same keyed call


def test_a_key_of_the_client_s_own_is_kept() -> None:
    sent = _body("s1", **{meta.CALL_ID: "c1", meta.IDEMPOTENCY_KEY: "k"})
    assert sent["idempotency_key"] == "k"


def test_a_call_nothing_names_has_no_key() -> None:
    assert "idempotency_key" not in _body(None)


def test_ids_too_long_to_join_make_a_key_of_their_digest() -> None:
    long = {meta.RUN_ID: "r" * MAX_ID_LENGTH, meta.CALL_ID: "c" * MAX_ID_LENGTH}
    key = _body(None, **long)["idempotency_key"]
    assert key.startswith("sha256:") and len(key) <= MAX_ID_LENGTH
    assert key == _body(None, **long)["idempotency_key"]
    assert parse_request(_body(None, **long), "alice").idempotency_key == key


def test_a_missing_key_is_worded_for_mcp() -> None:
    refused = meta.phrased(
        MalformedRequest("needs a key (the Idempotency-Key header)", code=meta.KEY_REQUIRED)
    )
    assert refused.code == meta.KEY_REQUIRED and meta.CALL_ID in refused.message
    other = MalformedRequest("bad", code="invalid_request")
    assert meta.phrased(other) is other
