"""The SQL the store speaks: statements, the dialect of a backend, and a transaction (:class:`Db`).

The statements are SQL text with bound parameters, run on the driver's connection: building
and compiling SQLAlchemy Core statements cost 0.3-0.6 ms each on the benchmark machine, several
times the statement itself, and every call runs a handful of them (``docs/performance.md``).
Each statement is written once with ``?`` placeholders (:class:`Sql`); a :class:`Dialect`
says which form its driver takes, and holds everything else that differs between backends, so
that nothing outside a dialect and its transactor asks which database it is.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any


def now_ms() -> int:
    return int(time.time() * 1000)


def placeholders(count: int) -> str:
    return ", ".join("?" * count)


class Sql:
    """One statement, written with ``?`` placeholders, in each driver's parameter style
    (DB-API ``paramstyle``: ``qmark`` for sqlite3, ``format`` for psycopg)."""

    __slots__ = ("format", "qmark")

    def __init__(self, text: str) -> None:
        self.qmark = " ".join(text.split())
        self.format = self.qmark.replace("?", "%s")


@dataclass(frozen=True, slots=True, eq=False)
class Dialect:
    """What differs between two backends' SQL and drivers. (The upserts, ``ON CONFLICT``,
    and the ``RETURNING`` the statements use are common to SQLite 3.35+ and PostgreSQL: a
    backend without them would add its forms here.)"""

    name: str
    paramstyle: str
    """Which text of a :class:`Sql` the driver takes: ``qmark`` or ``format``."""
    advisory_lock: str | None
    """Takes a transaction-scoped lock on a 63-bit key (its one parameter), serialising
    per-key work across sessions; None where write transactions are serial anyway."""
    skip_locked: str
    """Appended to a SELECT of rows to claim, so that concurrent claimers skip each other's."""
    try_advisory_lock: str | None
    """The same lock without waiting: one row, true when it was taken."""
    writing_ctes: bool
    """A ``WITH`` may hold an INSERT or a DELETE (PostgreSQL; not SQLite): two statements
    that would each cost a round trip are sent as one."""
    integrity_error: type[Exception]
    """The driver's exception for a violated constraint (a lost race to insert)."""
    driver_error: type[Exception]
    """The base of the driver's exceptions."""
    text: Callable[[Sql], str]
    """The statement's text for this driver."""

    @classmethod
    def of(
        cls,
        name: str,
        dbapi: Any,
        *,
        paramstyle: str,
        advisory_lock: str | None = None,
        skip_locked: str = "",
        try_advisory_lock: str | None = None,
        writing_ctes: bool = False,
    ) -> Dialect:
        """The dialect of a driver module ``dbapi`` (its error classes)."""
        return cls(
            name,
            paramstyle,
            advisory_lock,
            skip_locked,
            try_advisory_lock,
            writing_ctes,
            dbapi.IntegrityError,
            dbapi.Error,
            attrgetter(paramstyle),
        )


class Abort(Exception):
    """Roll the transaction back and return ``value`` from it."""

    def __init__(self, value: object) -> None:
        super().__init__("abort")
        self.value = value


class LockWait(Exception):
    """An advisory lock is held by another session, and this transaction may not wait for
    it (:attr:`Db.nowait`): it already holds the locks of other work, and waiting could
    deadlock. The transactor runs the work again on its own."""


class Db:
    """The driver connection of one transaction (what a domain operation gets)."""

    __slots__ = ("_lock", "_steps", "_text", "dialect", "nowait", "raw", "steps")

    def __init__(self, raw: Any, dialect: Dialect, steps: Any = None) -> None:
        """``steps``: a cursor of ``raw`` kept for the statements that always run to their
        end (``run``'s writes, ``all``'s reads, ``many``): a cursor made for each statement
        costs a sixth of a short one (sqlite3). ``one`` still gets a fresh cursor, dropped at
        once: a statement with rows left unread would stay open on a kept one, holding its
        read snapshot."""
        self.raw, self.dialect, self.steps = raw, dialect, steps
        self._steps = raw if steps is None else steps
        self._text, self._lock = dialect.text, dialect.advisory_lock
        self.nowait = False
        """Set by a transactor that groups writes: an advisory lock held elsewhere raises
        :class:`LockWait` instead of waiting."""

    def run(self, sql: Sql | str, params: Sequence[Any] = ()) -> int:
        """Execute; the number of rows changed."""
        if isinstance(sql, str):
            sql = Sql(sql)
        return int(self._steps.execute(self._text(sql), params).rowcount)

    def one(self, sql: Sql | str, params: Sequence[Any] = ()) -> Any:
        """The first row (a tuple), or None."""
        if isinstance(sql, str):
            sql = Sql(sql)
        return self.raw.execute(self._text(sql), params).fetchone()

    def all(self, sql: Sql | str, params: Sequence[Any] = ()) -> list[Any]:
        if isinstance(sql, str):
            sql = Sql(sql)
        return list(self._steps.execute(self._text(sql), params).fetchall())

    def many(self, sql: Sql | str, rows: Sequence[Sequence[Any]]) -> None:
        if isinstance(sql, str):
            sql = Sql(sql)
        if self.steps is not None:
            self.steps.executemany(self._text(sql), rows)
            return
        cursor = self.raw.cursor()
        try:
            cursor.executemany(self._text(sql), rows)
        finally:
            cursor.close()

    def advisory_lock(self, key: str) -> None:
        """Serialise work on ``key`` across sessions until the transaction ends (a no-op
        where the dialect needs none)."""
        if self._lock is None:
            return
        if not self.nowait:
            self.raw.execute(self._lock, (lock_id(key),))
            return
        row = self.raw.execute(self.dialect.try_advisory_lock, (lock_id(key),)).fetchone()
        if not row[0]:
            raise LockWait(key)


def lock_id(key: str) -> int:
    """A stable 63-bit id for an advisory lock (crc32 of two halves keeps it portable)."""
    data = key.encode("utf-8")
    return (zlib.crc32(data) << 31) ^ zlib.crc32(data[::-1])
