"""Identifiers for rows the store appends: time-ordered, so they append to their index.

A random id (uuid4) lands on a random page of its primary-key index, so every insert dirties
a different page; on the benchmark machine inserting an execution's seven events took about
twice as long with uuid4 ids as with these (``docs/performance.md``). Same shape as before:
a prefix and 32 hex digits (12 of milliseconds since the epoch, then 20 random), unique
without coordination, and they sort by creation time across processes.
"""

from __future__ import annotations

import os
import time


def sortable_id(prefix: str) -> str:
    """``<prefix>_`` + 12 hex digits of epoch milliseconds + 20 random hex digits."""
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"
