"""The rows the store appends to the event log (``store/rows.py``): what is hashed and
stored is exactly what ``events/chain.py`` documents, whatever the data."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import jsontext
from gateway.events.chain import GENESIS, event_hash
from gateway.events.model import EVENT_TYPES, Event, make_event
from gateway.store.rows import chained_rows

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def reference(events: list[Event], seq: int, prev: str) -> list[tuple[Any, ...]]:
    """Row by row, the plain way: ``jsontext.stored`` and ``event_hash``."""
    found = []
    for event in events:
        data = jsontext.stored(event.data)
        digest = event_hash(
            prev, event.execution_id, seq, event.id, event.type, event.version, event.at_ms, data
        )
        found.append(
            (event.id, event.execution_id, seq, event.type, event.version, event.at_ms, data,
             prev, digest)
        )  # fmt: skip
        prev, seq = digest, seq + 1
    return found


_types = st.sampled_from(sorted(EVENT_TYPES)) | st.text()


@given(
    st.lists(
        st.tuples(_types, st.dictionaries(st.text(), _json, max_size=5)), min_size=1, max_size=5
    ),
    st.text(),
    st.integers(min_value=0, max_value=2**40),
    st.text(),
)
def test_chained_rows_are_the_stored_data_and_the_documented_hashes(
    typed: list[tuple[str, dict[str, Any]]], execution_id: str, seq: int, prev: str
) -> None:
    """Quotes, control characters, non-ASCII, lone surrogates and floats included; the
    event types and others."""
    events = [
        make_event(execution_id, 0, "tool.output", data)._replace(type=type_)
        for type_, data in typed
    ]
    try:
        expected: Any = reference(events, seq, prev)
    except UnicodeEncodeError:  # a lone surrogate in a hashed string: neither way can
        expected = "unencodable"
    try:
        got: Any = chained_rows(events, seq, prev)
    except UnicodeEncodeError:
        got = "unencodable"
    assert got == expected


class Odd:
    def __str__(self) -> str:
        return "odd"


def test_data_that_is_not_json_is_stored_as_its_str_and_odd_fields_hash_the_general_way() -> None:
    event = Event("ev_1", "ex_1", 0, "tool.output", 1, 42, {"when": Odd(), "n": 1.5})
    ((*_, data, _prev, digest),) = chained_rows([event], 0, GENESIS)
    assert json.loads(data) == {"when": "odd", "n": 1.5}
    assert digest == event_hash(GENESIS, "ex_1", 0, "ev_1", "tool.output", 1, 42, data)
    flagged = Event("ev_2", "ex_1", 1, "tool.output", True, 42, {})  # a bool, not an int
    ((*_, digest2),) = chained_rows([flagged], 1, digest)
    assert digest2 == event_hash(digest, "ex_1", 1, "ev_2", "tool.output", True, 42, "{}")


def test_an_event_is_immutable_and_its_id_and_time_come_from_one_clock_read() -> None:
    event = make_event("ex_1", 3, "tool.started", {"adapter": "file"})
    with pytest.raises(AttributeError):
        event.seq = 4  # type: ignore[misc]
    assert int(event.id[3:15], 16) == event.at_ms  # the id's milliseconds are the event's
    assert event.to_json() == {
        "id": event.id,
        "execution_id": "ex_1",
        "seq": 3,
        "type": "tool.started",
        "version": 1,
        "at_ms": event.at_ms,
        "data": {"adapter": "file"},
    }
