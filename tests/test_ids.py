"""Time-ordered ids: same shape as a uuid4 hex id, unique, sorted by creation time."""

from __future__ import annotations

import re
import time

from gateway.ids import sortable_id


def test_ids_have_the_documented_shape_and_are_unique() -> None:
    ids = [sortable_id("ev") for _ in range(10_000)]
    assert all(re.fullmatch(r"ev_[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_ids_sort_by_creation_time() -> None:
    first = sortable_id("ex")
    time.sleep(0.002)
    second = sortable_id("ex")
    assert first < second
    millis = int(first[3:15], 16)
    assert abs(millis - time.time() * 1000) < 5_000
