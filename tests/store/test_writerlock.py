"""The writer lock that the gateway's processes on one SQLite file share (store/writerlock.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from gateway.store.writerlock import SUFFIX, WriterLock


def test_two_holders_exclude_each_other_and_a_waiter_gets_it_on_release(tmp_path: Path) -> None:
    database = str(tmp_path / "toolgate.db")
    first, second = WriterLock(database), WriterLock(database)
    assert (tmp_path / f"toolgate.db{SUFFIX}").exists()
    assert first.try_acquire()
    assert first.try_acquire()  # already its own: taken again at once
    assert not second.try_acquire()
    got = threading.Event()

    def wait() -> None:
        second.acquire()
        got.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    first.release()
    assert got.wait(10)
    waiter.join()
    assert not first.try_acquire()
    second.close()  # closing the file releases it
    assert first.try_acquire()
    first.close()


def test_a_database_in_memory_has_no_lock_file(tmp_path: Path) -> None:
    lock = WriterLock(":memory:")
    assert lock.try_acquire() and lock.try_acquire()
    lock.release()
    lock.close()
    assert list(tmp_path.iterdir()) == []
