"""Declared database connections: one pooled SQLAlchemy engine each, and transactions on them.

``adapters.database.connections`` of the configuration names each connection (a bare URL,
or ``{url, password_env, read_only, pool_size, max_overflow, pool_timeout, seed}``). A
password never stands in the file: ``password_env`` names the variable that holds it.

``run_transaction`` runs a synchronous unit of work in one transaction on a worker thread,
bounded by the database's own statement timeout and, past it (lock waits, a cancel), by an
interrupt sent from the event loop. The await is shielded: a write's outcome is always the
database's, never a thread abandoned while it may still commit.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, ClassVar, NoReturn, TypeVar

import anyio
import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, field_validator
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy.engine import Connection, Engine

from gateway.adapters.database.errors import translate
from gateway.adapters.database.options import Name
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ConfigError, ExecutionError, ToolgateError, ValidationError
from gateway.settings import Settings, make_directory
from gateway.units import parse_duration

log = logging.getLogger("toolgate.adapters.database")
T = TypeVar("T")
INTERRUPT_GRACE = 0.25
"""Seconds past the deadline before the event loop interrupts a statement that the
database's own timeout has not stopped."""


class ConnectionConfig(BaseModel):
    """One entry of ``adapters.database.connections`` (a bare string is its ``url``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(min_length=1)
    """A SQLAlchemy URL without a password; a relative SQLite path is relative to the config."""
    password_env: Name | None = None
    """The environment variable that holds the password."""
    read_only: bool = False
    """Every transaction read-only; write tools on this connection are refused at startup."""
    pool_size: int = Field(default=5, ge=1, le=100)
    max_overflow: int = Field(default=10, ge=0, le=100)
    pool_timeout: Annotated[float, PlainValidator(parse_duration)] = 10.0
    seed: Path | None = None
    """SQLite only: a Python file whose ``seed(url)`` creates the database when it is missing."""


class DatabaseConfig(BaseModel):
    """The ``adapters.database`` section of the gateway configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connections: dict[Name, ConnectionConfig] = Field(default_factory=dict)

    @field_validator("connections", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: {"url": v} if isinstance(v, str) else v for k, v in value.items()}
        return value


def parse_config(config: Mapping[str, Any]) -> DatabaseConfig:
    """The checked ``adapters.database`` section; ConfigError names every bad key."""
    try:
        return DatabaseConfig.model_validate(dict(config))
    except PydanticValidationError as exc:
        raise ConfigError(
            [
                f"adapters.database.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
                for err in exc.errors()
            ]
        ) from exc


# -- dialects -----------------------------------------------------------------------------


class Dialect:
    """How one kind of database begins, bounds, guards and interrupts a transaction."""

    name: ClassVar[str] = ""

    def begin_sql(self, write: bool) -> str | None:
        """The statement that opens a transaction (None: the driver begins implicitly)."""
        return None

    def before(self, dbapi: Any, write: bool, seconds: float) -> None:
        """Session settings made on the raw connection before the transaction begins."""

    def start(self, conn: Connection, write: bool, seconds: float) -> None:
        """Settings made first thing inside the transaction."""

    def after(self, dbapi: Any) -> None:
        """Undo on the pooled connection what ``before`` set."""

    def interrupt(self, engine: Engine, dbapi: Any) -> None:
        """Stop the statement running on ``dbapi`` (called from another thread)."""


class SQLiteDialect(Dialect):
    name = "sqlite"

    def begin_sql(self, write: bool) -> str:
        # IMMEDIATE takes the write lock up front: two writers never deadlock on an upgrade.
        return "BEGIN IMMEDIATE" if write else "BEGIN"

    def before(self, dbapi: Any, write: bool, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        dbapi.execute(f"PRAGMA query_only = {0 if write else 1}")
        dbapi.execute(f"PRAGMA busy_timeout = {max(int(seconds * 1000), 1)}")
        dbapi.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)

    def after(self, dbapi: Any) -> None:
        dbapi.set_progress_handler(None, 0)

    def interrupt(self, engine: Engine, dbapi: Any) -> None:
        dbapi.interrupt()


class PostgresDialect(Dialect):
    name = "postgresql"

    def start(self, conn: Connection, write: bool, seconds: float) -> None:
        timeout = f"SET LOCAL statement_timeout = {max(int(seconds * 1000), 1)}"
        # One round trip: without parameters psycopg runs both statements.
        conn.exec_driver_sql(timeout if write else f"SET TRANSACTION READ ONLY; {timeout}")

    def interrupt(self, engine: Engine, dbapi: Any) -> None:
        cancel = getattr(dbapi, "cancel_safe", None) or dbapi.cancel
        cancel()


class MariaDBDialect(Dialect):
    name = "mysql"

    def begin_sql(self, write: bool) -> str:
        return "START TRANSACTION" if write else "START TRANSACTION READ ONLY"

    def start(self, conn: Connection, write: bool, seconds: float) -> None:
        if getattr(conn.dialect, "is_mariadb", False):
            conn.exec_driver_sql(f"SET SESSION max_statement_time = {max(seconds, 0.001):.3f}")
        else:  # MySQL bounds SELECT statements only
            conn.exec_driver_sql(f"SET SESSION max_execution_time = {max(int(seconds * 1000), 1)}")

    def interrupt(self, engine: Engine, dbapi: Any) -> None:
        with engine.connect() as other:
            other.exec_driver_sql(f"KILL QUERY {int(dbapi.thread_id())}")


_DIALECTS: dict[str, Dialect] = {
    "sqlite": SQLiteDialect(),
    "postgresql": PostgresDialect(),
    "mysql": MariaDBDialect(),
    "mariadb": MariaDBDialect(),
}
_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mariadb+pymysql",
}
_EXTRAS = {"postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql"}


@dataclass(frozen=True, slots=True)
class DatabaseConnection:
    """A declared connection, opened: its pooled engine and how to talk to it."""

    name: str
    engine: Engine
    dialect: Dialect
    read_only: bool
    secret: str | None = None
    """The password, kept to scrub it from messages."""


# -- opening --------------------------------------------------------------------------------


def open_connection(name: str, spec: ConnectionConfig, settings: Settings) -> DatabaseConnection:
    """A pooled engine for one declared connection (nothing is connected yet), after
    creating a missing SQLite database with its ``seed``."""
    where = f"adapters.database.connections.{name}"
    url = _url(where, spec, settings)
    secret = _password(where, spec)
    if secret is not None:
        url = url.set(password=secret)
    dialect = _DIALECTS.get(url.get_backend_name())
    if dialect is None:
        known = ", ".join(sorted(_DIALECTS))
        raise ConfigError(f"{where}.url: unsupported database {url.get_backend_name()!r} ({known})")
    if dialect.name == "sqlite":
        _prepare_sqlite(where, spec, settings, url)
    elif spec.seed is not None:
        raise ConfigError(f"{where}.seed: seeding is only for SQLite example databases")
    engine = _engine(where, url, spec, dialect)
    return DatabaseConnection(name, engine, dialect, spec.read_only, secret)


def _url(where: str, spec: ConnectionConfig, settings: Settings) -> sa.URL:
    try:
        url = sa.engine.make_url(spec.url)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port not a number
        raise ConfigError(f"{where}.url: not a database URL") from exc
    if url.password:
        raise ConfigError(
            f"{where}.url: a password is written in the URL; remove it and name the "
            "environment variable that holds it in password_env"
        )
    if url.drivername in _DRIVERS:
        url = url.set(drivername=_DRIVERS[url.drivername])
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        url = url.set(database=str(settings.path(Path(url.database))))
    return url


def _password(where: str, spec: ConnectionConfig) -> str | None:
    if spec.password_env is None:
        return None
    value = os.environ.get(spec.password_env)
    if value is None:
        raise ConfigError(
            f"{where}.password_env: the environment variable {spec.password_env} is not set"
        )
    return value


def _engine(where: str, url: sa.URL, spec: ConnectionConfig, dialect: Dialect) -> Engine:
    kwargs: dict[str, Any] = {
        "pool_size": spec.pool_size,
        "max_overflow": spec.max_overflow,
        "pool_timeout": spec.pool_timeout,
    }
    if dialect.name == "sqlite":
        kwargs["connect_args"] = {"check_same_thread": False}
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = sa.create_engine(url, **kwargs)
    except (ImportError, sa.exc.NoSuchModuleError) as exc:
        extra = _EXTRAS.get(url.get_backend_name())
        hint = f" (pip install 'toolgate[{extra}]')" if extra else ""
        raise ConfigError(
            f"{where}.url: the driver {url.drivername!r} is not installed{hint}"
        ) from exc
    if dialect.name == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_connect)
    if dialect.begin_sql(True) is not None:
        sa.event.listen(engine, "begin", partial(_begin, dialect))
    return engine


def _sqlite_connect(dbapi: Any, _record: Any) -> None:
    dbapi.isolation_level = None  # transactions are begun explicitly, by _begin
    dbapi.execute("PRAGMA foreign_keys = ON")


def _begin(dialect: Dialect, conn: Connection) -> None:
    sql = dialect.begin_sql(bool(conn.get_execution_options().get("toolgate_write", False)))
    if sql is not None:
        conn.exec_driver_sql(sql)


def _prepare_sqlite(where: str, spec: ConnectionConfig, settings: Settings, url: sa.URL) -> None:
    if not url.database or url.database == ":memory:":
        raise ConfigError(
            f"{where}.url: an in-memory SQLite database would be private to one pooled "
            "connection; name a file"
        )
    path = Path(url.database)
    make_directory(path.parent, f"{where}.url")
    if spec.seed is not None and not path.exists():
        run_seed(where, settings.path(spec.seed), path)


def run_seed(where: str, script: Path, path: Path) -> None:
    """Create the SQLite database ``path`` with ``seed(url)`` of ``script``, atomically: the
    seed fills a temporary file of its own that becomes ``path`` only once it is complete.

    Replicas sharing the directory (docker-compose.yml) may seed at once, with the same pid
    (each is pid 1 in its container): the temporary file's name is unique whatever the pid,
    and it is linked into place, so the first database published is the one every replica
    keeps (one that opened it already keeps writing to it)."""
    if not script.is_file():
        raise ConfigError(f"{where}.seed: {script} does not exist")
    spec = importlib.util.spec_from_file_location(f"toolgate_seed_{path.stem}", script)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{where}.seed: {script} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".seeding", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        spec.loader.exec_module(module)
        seed = getattr(module, "seed", None)
        if not callable(seed):
            raise ConfigError(f"{where}.seed: {script} defines no seed(url) function")
        seed(f"sqlite:///{tmp}")
        try:
            os.link(tmp, path)
        except FileExistsError:
            log.info("the database %s was created by another process first: kept", path)
            return
    except ConfigError:
        raise
    except Exception as exc:
        log.exception("seeding %s with %s failed", path, script)
        raise ConfigError(f"{where}.seed: {script} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
            leftover.unlink(missing_ok=True)
    log.info("created the database %s with %s", path, script)


# -- transactions ----------------------------------------------------------------------------


class _NotStarted(Exception):
    """The transaction did not begin: cancelled, or no time left once a connection was free."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Interrupter:
    """Lets the event loop stop the statement that a worker thread is running."""

    def __init__(self, conn: DatabaseConnection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._dbapi: Any = None
        self.reason: str | None = None
        self.committing = False

    def attach(self, dbapi: Any) -> None:
        """Interrupts now reach ``dbapi``; raises _NotStarted if one came before."""
        with self._lock:
            if self.reason is not None:
                raise _NotStarted(self.reason)
            self._dbapi = dbapi

    def detach(self) -> None:
        with self._lock:
            self._dbapi = None

    def begin_commit(self) -> None:
        """From here on the outcome is the COMMIT's: it is never interrupted."""
        with self._lock:
            self.committing = True

    def fire(self, reason: str) -> None:
        with self._lock:
            if self.committing:
                return
            self.reason = reason
            if self._dbapi is None:
                return  # not started yet: attach() refuses to start
            try:
                self._conn.dialect.interrupt(self._conn.engine, self._dbapi)
            except Exception:
                log.warning("could not interrupt a statement on %s", self._conn.name, exc_info=True)


def _transaction(
    conn: DatabaseConnection,
    write: bool,
    deadline: float,
    guard: _Interrupter,
    work: Callable[[Connection], T],
) -> T:
    """Run ``work`` in one transaction that must end by ``deadline`` (monotonic); commit if
    it returns. The time left is measured once a pooled connection is in hand."""
    with conn.engine.connect() as sa_conn:
        seconds = deadline - time.monotonic()
        if seconds <= 0:
            raise _NotStarted("deadline")
        sa_conn = sa_conn.execution_options(toolgate_write=write)
        dbapi = sa_conn.connection.driver_connection
        conn.dialect.before(dbapi, write, seconds)
        try:
            guard.attach(dbapi)
            with sa_conn.begin():
                conn.dialect.start(sa_conn, write, seconds)
                result = work(sa_conn)
                guard.begin_commit()
            return result
        finally:
            guard.detach()
            conn.dialect.after(dbapi)


async def _watch(cancelled: anyio.Event, seconds: float, guard: _Interrupter) -> None:
    with anyio.move_on_after(seconds + INTERRUPT_GRACE):
        await cancelled.wait()
    await anyio.to_thread.run_sync(guard.fire, "cancelled" if cancelled.is_set() else "deadline")


def _not_started(tool: ToolDeclaration, reason: str) -> ExecutionError:
    if reason == "cancelled":
        return ExecutionError(f"{tool.ref} was cancelled before it started", code="cancelled")
    return ExecutionError(
        f"{tool.ref} had no time left once a database connection was free; nothing was started",
        code="deadline_exceeded",
        retryable=True,
    )


async def run_transaction(
    conn: DatabaseConnection,
    tool: ToolDeclaration,
    write: bool,
    seconds: float,
    cancelled: anyio.Event,
    work: Callable[[Connection], T],
) -> T:
    """``work`` in one transaction (read-only unless ``write``) on a worker thread, within
    ``seconds``; DBAPI errors come out translated (``gateway.adapters.database.errors``)."""
    if cancelled.is_set():
        raise _not_started(tool, "cancelled")
    guard = _Interrupter(conn)
    deadline = time.monotonic() + seconds
    tx = partial(_transaction, conn, write and not conn.read_only, deadline, guard, work)
    done: list[T] = []
    failure: Exception | None = None
    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch, cancelled, seconds, guard)
            try:
                done.append(await anyio.to_thread.run_sync(tx))
            except Exception as exc:  # raised below, outside the task group
                failure = exc
            tg.cancel_scope.cancel()
    if failure is None:
        return done[0]
    if isinstance(failure, _NotStarted):
        raise _not_started(tool, failure.reason) from None
    if isinstance(failure, sa.exc.DBAPIError):
        raise translate(
            failure,
            connection=conn.name,
            tool=tool.ref,
            side_effect=tool.side_effect,
            secret=conn.secret,
            interrupted_by=guard.reason,
            committing=guard.committing,
        ) from failure
    if isinstance(failure, sa.exc.TimeoutError):  # no pooled connection became free in time
        raise ExecutionError(
            f"every connection of {conn.name!r} is busy; nothing was started",
            code="database_busy",
            retryable=True,
        ) from failure
    if isinstance(failure, ToolgateError):
        raise failure  # raised by the work itself (unexpected_row_count, a probe's column)
    return _foreign(conn, tool, failure, guard.committing)


BIND_ERRORS = (OverflowError, UnicodeError, ValueError, TypeError)
"""What a driver raises, outside the DB-API's error classes, for a value it cannot bind
(sqlite3: an int wider than 64 bits, a lone surrogate)."""


def _foreign(
    conn: DatabaseConnection, tool: ToolDeclaration, failure: Exception, committing: bool
) -> NoReturn:
    """Any other failure of the transaction as a clear error: the transaction was rolled
    back (it never reached COMMIT), unless COMMIT itself failed (then nobody knows)."""
    # Logged with its traceback; never quoted: SQLAlchemy's text embeds statement and binds.
    log.warning("%s failed on %s", tool.ref, conn.name, exc_info=failure)
    if committing:
        raise ExecutionError(
            f"the connection {conn.name!r} failed while committing {tool.ref}; whether the "
            "change is in place is unknown: check it before retrying",
            code="interrupted",
        ) from failure
    orig = failure.orig if isinstance(failure, sa.exc.StatementError) else failure
    if isinstance(orig, BIND_ERRORS):
        raise ValidationError(
            f"a value of {tool.ref} cannot be bound for the database ({type(failure).__name__}:"
            " out of range or not representable); nothing changed",
            code="invalid_arguments",
        ) from failure
    raise ExecutionError(
        f"the database layer failed on {tool.ref} ({type(failure).__name__}); "
        "see the gateway log; the transaction was rolled back: nothing changed",
        code="database_error",
    ) from failure
