"""The idempotency key of a named call is derived once (gateway/client/keys.py): the kit
and the MCP door give the same call the same key, within the gateway's bound on keys."""

from __future__ import annotations

from gateway.client import CallOptions
from gateway.client.keys import MAX_KEY_LENGTH, call_key
from gateway.client.toolkit import with_call_id
from gateway.mcp import meta
from gateway.pipeline.request import MAX_ID_LENGTH, parse_request

LONGEST_RUN = "r" * MAX_ID_LENGTH
"""The longest run id a request may carry (docs/api.md#request-body)."""
FRAMEWORK_CALL = "call_" + "x" * 59
"""A framework's tool call id, as long as some are."""


def test_the_kit_s_bound_on_keys_is_the_gateway_s() -> None:
    assert MAX_KEY_LENGTH == MAX_ID_LENGTH


def test_the_kit_and_the_mcp_door_key_a_long_named_call_alike() -> None:
    kit = with_call_id(CallOptions(run_id=LONGEST_RUN), FRAMEWORK_CALL).idempotency_key
    origin = meta.CallOrigin("alice", None, 7, "client", "demo")
    named = {meta.RUN_ID: LONGEST_RUN, meta.CALL_ID: FRAMEWORK_CALL}
    door = meta.execution_body("fs.delete_file", {"path": "a"}, named, origin)
    assert kit == door["idempotency_key"]


def test_a_long_named_call_s_key_is_one_the_gateway_takes() -> None:
    options = with_call_id(CallOptions(run_id=LONGEST_RUN), FRAMEWORK_CALL)
    body = {
        "run_id": options.run_id,
        "call_id": options.call_id,
        "idempotency_key": options.idempotency_key,
        "tool": {"name": "fs.delete_file"},
        "workspace": {"id": "demo"},
    }
    assert parse_request(body, "alice").idempotency_key == call_key(LONGEST_RUN, FRAMEWORK_CALL)


def test_a_short_named_call_is_keyed_by_its_ids() -> None:
    assert with_call_id(CallOptions(run_id="r1"), "c1").idempotency_key == "r1/c1"


def test_a_key_the_options_give_is_sent_as_given_even_empty() -> None:
    """As the MCP door sends a ``_meta`` key as given: an empty one is the gateway's to
    refuse (400 invalid_request), never replaced by a derived one."""
    assert with_call_id(CallOptions(run_id="r1", idempotency_key="k"), "c1").idempotency_key == "k"
    assert with_call_id(CallOptions(run_id="r1", idempotency_key=""), "c1").idempotency_key == ""
