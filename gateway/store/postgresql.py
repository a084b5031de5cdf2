"""The PostgreSQL backend: transactions on worker threads, per-key work under advisory locks.

One thread hop per transaction, not per statement. Transaction-scoped advisory locks
serialise per-key work, so several gateway processes can share one database.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar, TypeVarTuple

import anyio
import sqlalchemy as sa

from gateway.store.sql import Db, Dialect
from gateway.store.transactor import Observer, Pool

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class PostgresTransactor:
    """Every transaction on a worker thread, on a pooled connection (:class:`Pool`)."""

    def __init__(self, url: str) -> None:
        # No pre-ping (a round trip per transaction): a connection found dead is replaced and
        # its transaction retried once, see Pool.transaction.
        self.engine = sa.create_engine(url, pool_size=10, max_overflow=20)
        self.dialect = Dialect.of(
            "postgresql",
            self.engine.dialect.loaded_dbapi,
            paramstyle="format",
            advisory_lock="SELECT pg_advisory_xact_lock(%s)",
            skip_locked=" FOR UPDATE SKIP LOCKED",
        )
        self._pool = Pool(self.engine, self.dialect, begin=(None, None))

    def transaction(self, fn: Callable[[Db, *Ts], T], write: bool, *args: *Ts) -> T:
        return self._pool.transaction(fn, write, *args)

    async def write(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        return await anyio.to_thread.run_sync(partial(self._pool.transaction, fn, True, *args))

    async def read(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        return await anyio.to_thread.run_sync(partial(self._pool.transaction, fn, False, *args))

    read_quick = read

    def observe(self, hook: Observer | None) -> None:
        self._pool.observer = hook

    def observe_batches(self, hook: Callable[[int], None] | None) -> None:
        """No group commit here: every write is its own transaction."""

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.engine.dispose)
