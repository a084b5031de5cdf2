"""Revoked API keys: one row per key id, read for every authenticated request.

A key is named by its id (``principals[].keys[].id`` in toolgate.yaml), never by its secret.
Every replica reads this table itself, for the request it authenticates, so a revocation is
in force everywhere as soon as its transaction commits: there is no cache to wait out.

Checks asked while a read of the table is running share the next read (:class:`Revocations`):
each is answered by a read that began after it was asked, which is what "as soon as it
commits" needs, and a busy gateway reads the table once per read's round trip rather than
once per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import cache

from gateway.store.sql import Db, Sql, now_ms, placeholders

MAX_SHARED = 64
"""Key ids one shared read asks about at most (a check beyond that reads on its own)."""
INSERT = Sql(
    "INSERT INTO revoked_keys (key_id, revoked_ms, revoked_by, reason) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key_id) DO NOTHING"
)
DELETE = Sql("DELETE FROM revoked_keys WHERE key_id = ?")
ALL = Sql("SELECT key_id, revoked_ms, revoked_by, reason FROM revoked_keys ORDER BY key_id")


@dataclass(frozen=True, slots=True)
class Revocation:
    key_id: str
    revoked_ms: int
    revoked_by: str
    reason: str


@cache
def _revoked_among(count: int) -> Sql:
    return Sql(f"SELECT key_id FROM revoked_keys WHERE key_id IN ({placeholders(count)})")


def revoked_among(db: Db, key_ids: Sequence[str]) -> set[str]:
    """Which of ``key_ids`` are revoked (one indexed read)."""
    return {str(row[0]) for row in db.all(_revoked_among(len(key_ids)), tuple(key_ids))}


@dataclass(eq=False)
class _Shared:
    """The checks waiting for the next read: their key ids and the answer they share."""

    future: asyncio.Future[set[str]]
    ids: set[str] = field(default_factory=set)


class Revocations:
    """Whether a key is revoked, read from the store for each check; checks asked while a
    read runs wait for the next one and share it.

    No answer is older than its question: a check that finds no read running reads at once;
    one that finds a read running joins the group that the next read (started when that one
    ends) will answer. A revocation that committed before a check was asked is in the
    snapshot of the read that answers it. The store keeps one for revoked keys and one
    for the page's ended sessions (``sessions.py``): the same question of another table."""

    def __init__(self, read: Callable[[Sequence[str]], Awaitable[set[str]]]) -> None:
        self._read = read
        self._running: asyncio.AbstractEventLoop | None = None
        """The loop of the read in flight (None: none is)."""
        self._next: _Shared | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def revoked(self, key_id: str) -> bool:
        loop = asyncio.get_running_loop()
        if self._running is None:
            self._running = loop
            try:
                return key_id in await self._read((key_id,))
            finally:
                self._start_next()
        shared = self._next
        if self._running is not loop or (shared is not None and len(shared.ids) >= MAX_SHARED):
            return key_id in await self._read((key_id,))  # a read of its own, at once
        if shared is None:
            shared = self._next = _Shared(loop.create_future())
            # Its outcome is seen even when every check that waited for it was cancelled.
            shared.future.add_done_callback(_retrieve)
        shared.ids.add(key_id)
        # shield: a cancelled check (its client went away) leaves the others' read alone.
        return key_id in await asyncio.shield(shared.future)

    def _start_next(self) -> None:
        shared, self._next = self._next, None
        if shared is None:
            self._running = None
            return
        task = asyncio.get_running_loop().create_task(self._answer(shared))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, shared: _Shared) -> None:
        try:
            found = await self._read(tuple(sorted(shared.ids)))
        except asyncio.CancelledError:  # the loop is closing: no read starts after this one
            waiting, self._next, self._running = self._next, None, None
            for group in (shared, waiting):
                if group is not None:
                    group.future.cancel()
            raise
        except Exception as exc:  # every check of the group fails as its own read would
            shared.future.set_exception(exc)
        else:
            shared.future.set_result(found)
        self._start_next()


def _retrieve(future: asyncio.Future[set[str]]) -> None:
    if not future.cancelled():
        future.exception()


def revoke(db: Db, key_id: str, by: str, reason: str) -> bool:
    """Revoke ``key_id``; False if it already was (the first revocation is kept)."""
    return db.run(INSERT, (key_id, now_ms(), by, reason)) == 1


def unrevoke(db: Db, key_id: str) -> bool:
    """Take a revocation back; False if there was none."""
    return db.run(DELETE, (key_id,)) == 1


def revocations(db: Db) -> list[Revocation]:
    return [Revocation(str(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in db.all(ALL)]
