"""The store's backend seam: a :class:`Transactor` runs the domain operations in transactions.

A domain operation is a function whose first argument is the transaction (:class:`Db`),
e.g. ``executions.reserve(db, ...)``; the store facade hands it, with its other arguments, to
the transactor: ``write`` (a read-write transaction), ``read``, or ``read_quick`` (a read of a
few index rows, which a backend may run without a thread hop). A backend is one transactor
and its :class:`~gateway.store.sql.Dialect` (``sqlite.py``, ``postgresql.py``).
:class:`Pool` is the plumbing both share: one transaction on a pooled connection, on the
calling (worker) thread, retried once on a connection found dead, and :class:`Pooled`, what
both transactors build on (``transaction`` and the observers); :class:`Committed` is the
future a queued write of a group commit is answered on, with a :data:`Finished`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, TypeVarTuple, cast

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from gateway.errors import StoreError
from gateway.store.sql import Abort, Db, Dialect

log = logging.getLogger("toolgate.store")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

Observer = Callable[[str, float, float | None], None]
"""``hook(name, wall_s, thread_cpu_s)``, called after each transaction on the thread that ran
it: ``name`` is the domain operation's (a group-commit batch is named after its first write),
the times span BEGIN to COMMIT. ``thread_cpu_s`` is None unless asked for (``observe(hook,
thread_cpu=True)``): the thread's CPU clock is a system call, read twice a transaction, that
only the bench's stage table uses."""


class Transactor(Protocol):
    """Runs domain operations in transactions of one backend."""

    engine: Engine
    dialect: Dialect

    async def write(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        """``fn(db, *args)`` in a read-write transaction; its exception rolls it back."""
        ...

    async def read(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T: ...

    async def read_quick(self, fn: Callable[[Db, *Ts], T], *args: *Ts) -> T:
        """A read that walks a bounded part of an index (a few rows)."""
        ...

    def transaction(self, fn: Callable[[Db, *Ts], T], write: bool, *args: *Ts) -> T:
        """The same, synchronously, on the calling thread (schema set-up, tools)."""
        ...

    def observe(self, hook: Observer | None, thread_cpu: bool = False) -> None: ...

    def observe_batches(self, hook: Callable[[int], None] | None) -> None:
        """``hook(size)`` after each group commit of ``size`` writes (a backend without group
        commit never calls it)."""

    async def aclose(self) -> None: ...


class Outcome(enum.Enum):
    """How a transaction run for a waiting task (on a thread of the backend's, or in a group
    commit) ended, as that task learns it (:data:`Finished`)."""

    OK = "ok"
    """It committed (a read: it ran); the value is what the operation returned (or its
    ``Abort``'s value)."""
    ERROR = "error"
    """It failed and changed nothing; the value is the exception the task raises."""
    BUSY = "busy"
    """SQLite: another connection holds the write lock and nothing ran (value None); the
    write runs on a worker thread that waits for the lock."""
    AGAIN = "again"
    """PostgreSQL: a write of a group commit met a lock held elsewhere or a deadlock and was
    rolled back (the value is the error); it runs again, alone."""


Finished = tuple[Outcome, Any]
"""A transaction's :class:`Outcome` and its value."""


class Committed(asyncio.Future[Finished]):
    """The outcome of one write of a group commit (:data:`Finished`), for the task that queued it.

    It refuses to be cancelled: a task cancelled while its write is queued still waits for the
    COMMIT (the write happens, awaited or not) and gets its CancelledError only then, so it
    never goes on believing a committed write did not happen. (A shielded anyio cancel scope
    around the await does the same for anyio's cancellations, not for
    ``Task.cancel``, and its enter and exit cost several times this.)
    """

    def cancel(self, msg: Any = None) -> bool:
        return False


def unavailable(exc: BaseException) -> StoreError:
    log.warning("store operation failed: %s", exc)
    return StoreError("the execution store is unavailable; try again")


def quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception as exc:  # the original error is the one to report
        log.debug("rollback failed: %s", exc)


def name_of(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", None) or repr(fn)


class Timer:
    """Times transactions for an :data:`Observer` (the thread's CPU time only if asked)."""

    __slots__ = ("hook", "thread_cpu")

    def __init__(self, hook: Observer, thread_cpu: bool) -> None:
        self.hook, self.thread_cpu = hook, thread_cpu

    def __call__(self, fn: Callable[..., Any], run: Callable[..., T], *args: Any) -> T:
        """``run(*args)``, reported to the hook under ``fn``'s name."""
        if not self.thread_cpu:
            start = time.perf_counter()
            try:
                return run(*args)
            finally:
                self.hook(name_of(fn), time.perf_counter() - start, None)
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return run(*args)
        finally:
            self.hook(name_of(fn), time.perf_counter() - start, time.thread_time() - cpu)


def timer(hook: Observer | None, thread_cpu: bool) -> Timer | None:
    """What a transactor times its transactions with: None when nothing observes them."""
    return None if hook is None else Timer(hook, thread_cpu)


class _CommitFailed(Exception):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Pool:
    """Transactions on the engine's pooled connections, on the calling thread.

    ``begin``: the statements that start a read and a write transaction (None: the driver
    starts one itself)."""

    def __init__(self, engine: Engine, dialect: Dialect, begin: tuple[str | None, str | None]):
        self.engine, self.dialect = engine, dialect
        self._begin_read, self._begin_write = begin
        self.timer: Timer | None = None

    def transaction(self, fn: Callable[[Db, *Ts], T], write: bool, *args: *Ts) -> T:
        """Run ``fn`` in one transaction on a pooled connection.

        A pooled connection the server dropped (a restart, an idle timeout) shows as a
        disconnect on the first statement; such a transaction is retried once on a new
        connection. A failure at COMMIT is never retried: whether it committed is unknown.
        """
        driver_error, integrity_error = self.dialect.driver_error, self.dialect.integrity_error
        for attempt in (1, 2):
            try:
                proxy = self.engine.raw_connection()
            except (SQLAlchemyError, driver_error) as exc:
                raise unavailable(exc) from exc
            raw: Any = proxy.driver_connection
            try:
                timed = self.timer
                if timed is None:
                    return self._in_transaction(raw, write, fn, args)
                return timed(fn, self._in_transaction, raw, write, fn, args)
            except _CommitFailed as failed:
                proxy.invalidate()
                raise unavailable(failed.cause) from failed.cause
            except integrity_error:
                raise
            except driver_error as exc:
                gone = self.engine.dialect.is_disconnect(cast(Any, exc), raw, None)
                if gone:
                    proxy.invalidate()
                if gone and attempt == 1:
                    log.info("store connection was lost; retrying on a new one: %s", exc)
                    continue
                raise unavailable(exc) from exc
            finally:
                proxy.close()
        raise AssertionError("unreachable")

    def _in_transaction(
        self, raw: Any, write: bool, fn: Callable[[Db, *Ts], T], args: tuple[*Ts]
    ) -> T:
        """Begin, run ``fn``, commit; roll back on any exception. A failed COMMIT is raised
        as _CommitFailed: whether it took effect is unknown."""
        begin = self._begin_write if write else self._begin_read
        if begin is not None:
            raw.execute(begin)
        try:
            result = fn(Db(raw, self.dialect), *args)
        except Abort as abort:
            raw.rollback()
            return cast(T, abort.value)
        except BaseException:
            quietly(raw.rollback)
            raise
        try:
            raw.commit()
        except self.dialect.driver_error as exc:
            quietly(raw.rollback)
            raise _CommitFailed(exc) from exc
        return result


class Pooled:
    """What both transactors share: ``transaction`` on the engine's pool, and the hooks that
    observe transactions (``timer``, which the pool shares) and group commits."""

    def __init__(
        self, engine: Engine, dialect: Dialect, begin: tuple[str | None, str | None]
    ) -> None:
        self.engine, self.dialect = engine, dialect
        self._pool = Pool(engine, dialect, begin)
        self.timer: Timer | None = None
        self._batch_observer: Callable[[int], None] | None = None

    def observe(self, hook: Observer | None, thread_cpu: bool = False) -> None:
        self.timer = self._pool.timer = timer(hook, thread_cpu)

    def observe_batches(self, hook: Callable[[int], None] | None) -> None:
        self._batch_observer = hook

    def transaction(self, fn: Callable[[Db, *Ts], T], write: bool, *args: *Ts) -> T:
        return self._pool.transaction(fn, write, *args)
