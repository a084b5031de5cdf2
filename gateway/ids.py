"""Identifiers for rows the store appends: time-ordered, so they append to their index.

A random id (uuid4) lands on a random page of its primary-key index, so every insert dirties
a different page; on the benchmark machine inserting an execution's seven events took about
twice as long with uuid4 ids as with these (``docs/performance.md``). Same shape as before:
a prefix and 32 hex digits (12 of milliseconds since the epoch, then 20 random), unique
without coordination, and they sort by creation time across processes.

The random digits come from the operating system's generator (``os.urandom``), drawn a few
kilobytes at a time rather than once per id (a call makes eight ids; a system call each cost
more than the rest of the id) and cut into pieces of the size asked for, each handed out once
(``list.pop`` is atomic: no lock; two threads that refill at once each use their own
pieces); a forked child draws its own.
``random_hex`` serves the trace and span ids of ``gateway/tracecontext.py`` from the same pool.
"""

from __future__ import annotations

import os
import time

_POOL_BYTES = 4096
_DIGITS = 20  # hex digits of randomness per id (10 bytes)

_pools: dict[int, list[str]] = {}  # digits -> pieces of that many hex digits, not yet used


def _forget() -> None:
    """In a forked child: nothing of the parent's pools may be used again (the parent uses
    them)."""
    global _pools
    _pools = {}


os.register_at_fork(after_in_child=_forget)


def random_hex(digits: int = _DIGITS) -> str:
    """``digits`` (at most ``2 * _POOL_BYTES``) random hex digits from the pool, used once."""
    try:
        return _pools[digits].pop()
    except (KeyError, IndexError):
        return _refill(digits)


def _refill(digits: int) -> str:
    """A new pool of ``digits``-digit pieces, and one of them. It replaces an empty pool, or
    one another thread made meanwhile, whose pieces left are dropped (never handed out)."""
    text = os.urandom(_POOL_BYTES).hex()
    pieces = [text[at : at + digits] for at in range(0, len(text) - digits + 1, digits)]
    mine = pieces.pop()
    _pools[digits] = pieces
    return mine


def sortable_id(prefix: str, ms: int | None = None) -> str:
    """``<prefix>_`` + 12 hex digits of epoch milliseconds (``ms``, else now) + 20 random hex
    digits."""
    if ms is None:
        ms = time.time_ns() // 1_000_000
    return f"{prefix}_{ms:012x}{random_hex()}"
