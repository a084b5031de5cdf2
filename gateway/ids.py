"""Identifiers for rows the store appends: time-ordered, so they append to their index.

A random id (uuid4) lands on a random page of its primary-key index, so every insert dirties
a different page; on the benchmark machine inserting an execution's seven events took about
twice as long with uuid4 ids as with these (``docs/performance.md``). Same shape as before:
a prefix and 32 hex digits (12 of milliseconds since the epoch, then 20 random), unique
without coordination, and they sort by creation time across processes.

The random digits come from the operating system's generator (``os.urandom``), drawn a few
kilobytes at a time rather than once per id (a call makes eight ids; a system call each cost
more than the rest of the id). Each slice is used once; a forked child draws its own.
``random_hex`` serves the trace and span ids of ``gateway/tracecontext.py`` from the same pool.
"""

from __future__ import annotations

import os
import threading
import time

_POOL_BYTES = 4096
_DIGITS = 20  # hex digits of randomness per id (10 bytes)

_lock = threading.Lock()
_pool = ""  # hex digits not yet used
_at = 0


def _forget() -> None:
    """In a forked child: nothing of the parent's pool may be used again (the parent uses
    it), and the lock may have been held by a thread that does not exist here."""
    global _lock, _pool, _at
    _lock, _pool, _at = threading.Lock(), "", 0


os.register_at_fork(after_in_child=_forget)


def random_hex(digits: int = _DIGITS) -> str:
    """``digits`` (at most ``2 * _POOL_BYTES``) random hex digits from the pool, used once."""
    global _pool, _at
    with _lock:
        at = _at
        end = at + digits
        if end > len(_pool):
            _pool, at, end = os.urandom(_POOL_BYTES).hex(), 0, digits
        _at = end
        return _pool[at:end]


def sortable_id(prefix: str) -> str:
    """``<prefix>_`` + 12 hex digits of epoch milliseconds + 20 random hex digits."""
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{random_hex()}"
