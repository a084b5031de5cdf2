"""DBAPI errors of SQLite, PostgreSQL (psycopg) and MariaDB (PyMySQL) as the project's errors.

Each error falls in one category by the driver's own code (SQLite result code, MariaDB
errno, SQLSTATE), else by SQLAlchemy's DB-API wrapper class:

    sql            syntax, unknown table/column, bad value      final
    constraint     unique, foreign key, check, not null         final
    read_only      a write in a read-only transaction           final
    conflict       deadlock, serialisation failure, busy, lock  retryable
    interrupted    statement timeout or our interrupt           retryable (timeout) / cancelled
    unavailable    refused, lost connection, server shutdown    retryable
    database       anything else                                final

A failure while committing is ``interrupted``: whether the change landed is unknown, so the
pipeline reconciles it. The message quotes the database's first line only, without the
password; never the SQLAlchemy text (it embeds the statement and its parameters).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from gateway.errors import ExecutionError, ToolgateError
from gateway.types import SideEffect

_SQLITE = {5: "conflict", 6: "conflict", 8: "read_only", 9: "interrupted", 19: "constraint"}
_SQLITE.update({1: "sql", 18: "sql", 20: "sql", 25: "sql", 13: "unavailable", 14: "unavailable"})
_MARIADB = {
    **dict.fromkeys((1205, 1213, 1020, 1412), "conflict"),
    **dict.fromkeys((1317, 1969, 3024), "interrupted"),
    **dict.fromkeys((1792, 1290, 1836), "read_only"),
    **dict.fromkeys((1022, 1048, 1062, 1169, 1216, 1217, 1451, 1452, 1557), "constraint"),
    **dict.fromkeys((3819, 4025), "constraint"),
    **dict.fromkeys((1040, 1053, 1203, 2002, 2003, 2005, 2006, 2013, 2055), "unavailable"),
}
_SQLSTATE = {"40001": "conflict", "40P01": "conflict", "55P03": "conflict"}
_SQLSTATE.update({"57014": "interrupted", "25006": "read_only"})
_SQLSTATE_CLASS = {"23": "constraint", "42": "sql", "22": "sql", "0A": "sql", "21": "sql"}
_SQLSTATE_CLASS.update(dict.fromkeys(("08", "53", "57", "58"), "unavailable"))
_WRAPPERS: tuple[tuple[type[Exception], str], ...] = (
    (sa.exc.IntegrityError, "constraint"),
    (sa.exc.ProgrammingError, "sql"),
    (sa.exc.DataError, "sql"),
    (sa.exc.NotSupportedError, "sql"),
    (sa.exc.OperationalError, "unavailable"),
)
_MESSAGES = {
    "sql": ("sql_error", False, "the database rejected the SQL of {tool}: {reason}"),
    "constraint": ("constraint_violation", False, "{tool} violates a constraint: {reason}"),
    "read_only": (
        "read_only_violation",
        False,
        "{tool} is read-only and the database refused to write: {reason}",
    ),
    "conflict": (
        "database_conflict",
        True,
        "{tool} collided with a concurrent transaction ({reason}); retry",
    ),
    "timeout": (
        "statement_timeout",
        True,
        "{tool} did not finish before its deadline and the database stopped it",
    ),
    "unavailable": (
        "database_unavailable",
        True,
        "the database of connection {conn!r} is unavailable ({reason})",
    ),
    "database": ("database_error", False, "the database failed on {tool}: {reason}"),
}
MAX_REASON = 300


def category(exc: sa.exc.DBAPIError) -> str:
    """The category of a DBAPI error, whichever driver raised it."""
    if exc.connection_invalidated:
        return "unavailable"
    orig = exc.orig
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        return _SQLITE.get(code & 0xFF, "database")  # the primary result code
    errno = orig.args[0] if orig is not None and orig.args else None
    if isinstance(errno, int) and errno in _MARIADB:
        return _MARIADB[errno]
    sqlstate = getattr(orig, "sqlstate", None)  # psycopg, and PyMySQL for other errnos
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        return _SQLSTATE.get(sqlstate) or _SQLSTATE_CLASS.get(sqlstate[:2], "database")
    for wrapper, name in _WRAPPERS:
        if isinstance(exc, wrapper):
            return name
    return "database"


def scrub(text: str, secret: str | None) -> str:
    """``text`` without ``secret``, cut to its first line and MAX_REASON characters."""
    if secret:
        text = text.replace(secret, "***")
    lines = text.strip().splitlines()
    return lines[0][:MAX_REASON] if lines else ""


def reason(exc: sa.exc.DBAPIError, secret: str | None) -> str:
    """The database's own words, without the statement, parameters or password."""
    orig: Any = exc.orig
    primary = getattr(getattr(orig, "diag", None), "message_primary", None)
    if isinstance(primary, str):  # psycopg
        return scrub(primary, secret)
    args: tuple[Any, ...] = tuple(getattr(orig, "args", ()))
    if len(args) >= 2 and isinstance(args[0], int) and isinstance(args[1], str):
        return scrub(args[1], secret)  # PyMySQL: (errno, message)
    return scrub(str(orig) if orig is not None else type(exc).__name__, secret)


def translate(
    exc: sa.exc.DBAPIError,
    *,
    connection: str,
    tool: str,
    side_effect: SideEffect,
    secret: str | None,
    interrupted_by: str | None,
    committing: bool,
) -> ToolgateError:
    """A DBAPI error as an ExecutionError with a stable code and a truthful ``retryable``.

    ``interrupted_by`` is "cancelled" or "deadline" when the gateway interrupted the statement;
    ``committing`` says the error came from COMMIT itself.
    """
    kind = category(exc)
    if kind == "interrupted" and interrupted_by == "cancelled":
        return ExecutionError(f"{tool} was cancelled; it was rolled back", code="cancelled")
    if committing:
        # "interrupted" is reconciled by the pipeline: the change may or may not be in place.
        return ExecutionError(
            f"the connection {connection!r} failed while committing {tool}; whether the "
            "change is in place is unknown: check it before retrying",
            code="interrupted",
        )
    code, retryable, template = _MESSAGES["timeout" if kind == "interrupted" else kind]
    message = template.format(tool=tool, conn=connection, reason=reason(exc, secret))
    if side_effect not in (SideEffect.NONE, SideEffect.READ):
        message += "; the transaction was rolled back: nothing changed"
    return ExecutionError(message, code=code, retryable=retryable)
