"""gateway/tracecontext.py: which traceparent values are kept, and what a child is."""

from __future__ import annotations

import json
import re

import pytest

from gateway import jsontext, tracecontext
from gateway.pipeline.records import ToolExecutionRequest
from gateway.pipeline.request import parse_request

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SHAPE = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01")


def test_a_valid_header_is_kept_and_a_later_version_is_read_as_00() -> None:
    assert tracecontext.parse(PARENT) == PARENT
    assert tracecontext.parse(" " + PARENT + "\t") == PARENT  # optional white space
    assert tracecontext.parse("01" + PARENT[2:] + "-what-comes-next") == PARENT
    assert tracecontext.parse("cc" + PARENT[2:]) == PARENT


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        PARENT.upper(),
        PARENT + "-extra",  # version 00 has exactly four fields
        "ff" + PARENT[2:],
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        PARENT.replace("-", "_"),
        PARENT[:-1],
    ],
)
def test_a_malformed_header_is_none(header: str) -> None:
    assert tracecontext.parse(header) is None


def test_incoming_keeps_one_valid_header_else_starts_a_trace() -> None:
    assert tracecontext.incoming([PARENT]) == PARENT
    for headers in ([], ["garbage"], [PARENT, PARENT]):
        started = tracecontext.incoming(headers)
        assert SHAPE.fullmatch(started) and started.split("-")[1] != PARENT.split("-")[1]
    assert tracecontext.new() != tracecontext.new()


def test_a_child_keeps_the_trace_and_flags_under_a_new_parent_id() -> None:
    unsampled = PARENT[:-2] + "00"
    first, second = tracecontext.child(unsampled), tracecontext.child(unsampled)
    for child in (first, second):
        version, trace_id, parent_id, flags = child.split("-")
        assert (version, trace_id, flags) == ("00", PARENT.split("-")[1], "00")
        assert re.fullmatch("[0-9a-f]{16}", parent_id) and parent_id != PARENT.split("-")[2]
    assert first != second
    assert SHAPE.fullmatch(tracecontext.child(None))
    assert SHAPE.fullmatch(tracecontext.child("garbage"))


def test_a_request_keeps_its_traceparent_in_its_stored_form() -> None:
    body = {"run_id": "r", "call_id": "c", "tool": {"name": "t"}, "workspace": {"id": "w"}}
    request = parse_request(body, "alice", None, [PARENT])
    assert request.traceparent == PARENT
    stored = json.loads(jsontext.compact(request.to_json()))
    assert ToolExecutionRequest.from_json(stored).traceparent == PARENT
    del stored["traceparent"]  # stored before the gateway kept it
    assert ToolExecutionRequest.from_json(stored).traceparent is None
    assert SHAPE.fullmatch(parse_request(body, "alice").traceparent or "")
