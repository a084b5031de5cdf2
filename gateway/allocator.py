"""The C allocator under the gateway: fewer malloc arenas, and free memory given back.

glibc's malloc gives each new thread an arena of its own, up to eight per core (then they
share), and an arena keeps the pages of what it once held: freed memory is reused by that
arena only, and given back to the system only from its top. The store's reads run
on a pool of worker threads, so a burst of memory once a minute (an audit checkpoint's
heads, a connection's page cache filled by a range of events) lands on one arena after
another, and the process's resident memory steps up each time although nothing is held
(``bench/soak.py``, docs/performance.md#soak). :func:`limit_arenas` keeps those bursts in
the same few arenas; :func:`trim` gives the free pages of every arena back after one.

Elsewhere than glibc both do nothing. ``MALLOC_ARENA_MAX`` in the environment wins.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

ARENAS = 2
"""Arenas for the whole process, which its threads share (the GIL lets one thread at a time
run Python; what threads allocate without it is SQLite's, briefly)."""
_M_ARENA_MAX = -8
"""``mallopt`` parameter number, from glibc's ``malloc.h``."""


def _glibc() -> Any | None:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 -- raises AttributeError off glibc
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most ``arenas`` malloc arenas from now on (call before threads start); False if
    not done (not glibc, or ``MALLOC_ARENA_MAX`` set: the operator's choice stands)."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def trim() -> bool:
    """Give the free pages of every arena back to the system (``malloc_trim(0)``); True if
    some were. A few milliseconds: run it on a worker thread after a burst, not per call."""
    libc = _glibc()
    return False if libc is None else bool(libc.malloc_trim(0))
