"""Time-ordered ids: same shape as a uuid4 hex id, unique, sorted by creation time."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

from gateway.ids import _POOL_BYTES, random_hex, sortable_id


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


@pytest.mark.slow  # forks a child itself
def test_a_forked_child_never_reuses_the_parents_random_digits() -> None:
    sortable_id("ev")  # the parent has a pool drawn
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, "".join(sortable_id("ev")[15:] for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    child = {text[i : i + 20] for i in range(0, len(text), 20)}
    parent = {sortable_id("ev")[15:] for _ in range(50)}
    assert len(child) == 50
    assert not child & parent


def test_ids_made_on_many_threads_are_unique() -> None:
    found: list[str] = []

    def make() -> None:
        found.extend(sortable_id("ev") for _ in range(2_000))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(found)) == len(found) == 16_000


def test_random_digits_of_each_size_come_from_a_pool_of_that_size_each_piece_once() -> None:
    # more than one pool's worth of each size: the refills too hand out each piece once
    for digits in (16, 20, 32):
        pieces = [random_hex(digits) for _ in range(3 * 2 * _POOL_BYTES // digits)]
        assert all(re.fullmatch(f"[0-9a-f]{{{digits}}}", p) for p in pieces)
        assert len(set(pieces)) == len(pieces)


def test_an_id_made_for_a_given_millisecond_carries_it() -> None:
    assert sortable_id("ev", 0x0123456789AB)[:15] == "ev_0123456789ab"
