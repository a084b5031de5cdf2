"""Naming what was done to one chain (``gateway/audit/chains.py``), on rows built by the
store's own chaining (``rows.chained_rows``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from gateway.audit.chains import check_chain, row_hash
from gateway.events.chain import GENESIS, event_hash
from gateway.events.model import make_event
from gateway.store.audit import ChainRow
from gateway.store.rows import chained_rows


def chain(length: int = 6) -> list[ChainRow]:
    events = [make_event("ex_1", 0, "tool.output", {"i": i, "text": "ü"}) for i in range(length)]
    return [ChainRow(*row) for row in chained_rows(events, 0, GENESIS)]


def named(rows: list[ChainRow]) -> list[tuple[str, int | None]]:
    return [(f.what, f.seq) for f in check_chain(rows)]


def renumber(rows: list[ChainRow], start: int, by: int) -> list[ChainRow]:
    return [replace(r, seq=r.seq + by) if r.seq >= start else r for r in rows]


def test_an_intact_chain_has_no_fault_and_links_every_row() -> None:
    rows = chain()
    assert named(rows) == []
    assert rows[0].prev == GENESIS and all(b.prev == a.hash for a, b in pairwise(rows))


def test_the_hash_is_taken_over_the_documented_json_array() -> None:
    digest = event_hash(GENESIS, "ex_1", 3, "ev_1", "tool.output", 1, 42, '{"a":"\\u00fc"}')
    data = (
        b'["toolgate.event.v1","' + GENESIS.encode() + b'","ex_1",3,"ev_1","tool.output",1,42,'
        b'"{\\"a\\":\\"\\\\u00fc\\"}"]'
    )
    assert digest == hashlib.sha256(data).hexdigest()
    assert event_hash(GENESIS, "ex_1", 3, "ev_1", "tool.output", 1, 42, "{}") != event_hash(
        GENESIS, "ex_1", 4, "ev_1", "tool.output", 1, 42, "{}"
    )


@given(
    st.text(),
    st.text(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(),
    st.text(),
    st.integers(),
    st.integers(),
    st.text(),
)
def test_the_hash_is_over_the_documented_compact_array_for_any_strings_and_ints(
    prev: str, xid: str, seq: int, eid: str, type_: str, version: int, at: int, data: str
) -> None:
    """Quotes, backslashes, control characters, non-ASCII and lone surrogates included: the
    hashed bytes are the compact JSON array docs/security.md describes, as a verifier with
    nothing but the standard library writes it."""
    row = ["toolgate.event.v1", prev, xid, seq, eid, type_, version, at, data]

    def outcome(make: Callable[[], str]) -> str:
        try:
            return make()
        except UnicodeEncodeError:  # a lone surrogate: UTF-8 cannot carry it, either way
            return "unencodable"

    fast = outcome(lambda: event_hash(prev, xid, seq, eid, type_, version, at, data))
    documented = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
    assert fast == outcome(lambda: hashlib.sha256(documented.encode("utf-8")).hexdigest())


def test_an_edited_row_is_named() -> None:
    rows = chain()
    rows[2] = replace(rows[2], data_json='{"i":99}')
    assert named(rows) == [("edited", 2)]
    rows = chain()
    rows[4] = replace(rows[4], type="tool.completed")
    assert named(rows) == [("edited", 4)]


def test_a_row_rewritten_with_a_fresh_hash_is_named_by_the_broken_link_after_it() -> None:
    rows = chain()
    rows[2] = replace(rows[2], data_json='{"i":99}')
    rows[2] = replace(rows[2], hash=row_hash(rows[2]))
    assert named(rows) == [("edited", 2)]


def test_deletions_are_named_with_or_without_renumbering() -> None:
    rows = chain()
    assert named(rows[:3] + rows[4:]) == [("deleted", 3)]
    assert named(rows[1:]) == [("deleted", 0)]
    assert named(renumber(rows[:2] + rows[4:], 4, -2)) == [("deleted", 2)]


def test_a_reordering_is_named() -> None:
    rows = chain()
    swapped = [*rows[:1], replace(rows[2], seq=1), replace(rows[1], seq=2), *rows[3:]]
    assert named(swapped) == [("reordered", 1), ("reordered", 2)]


def test_an_insertion_is_named() -> None:
    rows = chain()
    extra = make_event("ex_1", 0, "tool.output", {"forged": True})
    (forged,) = [ChainRow(*r) for r in chained_rows([extra], 2, rows[1].hash or "")]
    assert named([*rows[:2], forged, *renumber(rows[2:], 2, 1)]) == [("inserted", 2)]
    bogus = replace(forged, hash="f" * 64)  # not even hashed right: still named inserted
    assert named([*rows[:2], bogus, *renumber(rows[2:], 2, 1)]) == [("inserted", 2)]


def test_a_row_without_a_link_is_named_unchained() -> None:
    rows = chain(3)
    rows.append(replace(chain(4)[3], prev=None, hash=None))
    assert named(rows) == [("unchained", 3)]
