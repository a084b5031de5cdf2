"""The database adapter: declared, parameterised SQL on named connections (SQLAlchemy).

A tool names a connection of the gateway configuration (``adapters.database.connections``)
and declares one statement whose values are bind parameters (``:name``), bound from the
normalised arguments and the declared ``binds``. Nothing is ever spliced into SQL text: SQL
with ``{template}`` holes is refused when the declaration loads.

- ``query`` returns rows as dicts within ``max_rows`` and the output budget (``truncated``);
  ``execute`` runs in one transaction and reports the rows affected (and ``RETURNING`` rows),
  rolled back if ``expect_rows`` is declared and not met.
- Tools with ``side_effect: read`` and every probe run in a transaction that the database
  itself keeps read-only: SQLite ``PRAGMA query_only``, PostgreSQL ``SET TRANSACTION READ
  ONLY``, MariaDB ``START TRANSACTION READ ONLY``.
- The deadline becomes a statement timeout (SQLite progress handler and busy timeout,
  PostgreSQL ``statement_timeout``, MariaDB ``max_statement_time``); a cancel interrupts the
  running statement (``gateway.adapters.database.engines``).
- Probes: ``row_version`` (the declared version query, for ``expected_state.row_version``) and
  ``query`` (a declared read query: its ``column``, its only column, or the row).
- DBAPI errors are translated at this edge (``gateway.adapters.database.errors``).

Declaration keys: ``gateway.adapters.database.options``; a full example with every key is in
``docs/adapters/database.md``.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Iterable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from functools import partial
from typing import Any, ClassVar

import anyio
from sqlalchemy.engine import Connection

from gateway.adapters.base import AdapterCall, AdapterOutcome, Evidence
from gateway.adapters.base import SideEffectReport as Effect
from gateway.adapters.database.engines import (
    DatabaseConfig,
    DatabaseConnection,
    open_connection,
    parse_config,
    run_transaction,
)
from gateway.adapters.database.options import (
    READS,
    DatabaseOptions,
    bind_names,
    check_tool,
    options_of,
    statement,
    statement_view,
)
from gateway.adapters.database.spec import SPEC
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.model import ToolDeclaration
from gateway.declarations.templates import TemplateError
from gateway.errors import ConfigError, ExecutionError, ValidationError
from gateway.settings import Settings
from gateway.types import JSON, Outcome

INT64 = (-(2**63), 2**63 - 1)
"""The integers a bind may carry, on every engine: SQLite's INTEGER, PostgreSQL's and
MariaDB's BIGINT. A wider one (JSON allows it) is refused before anything starts; a tool
that needs larger numbers takes them as strings and casts in its SQL."""
PROBE_FLOOR = 5.0
"""Seconds a probe may always take: reconcile probes run after the call's deadline."""
Rows = list[dict[str, JSON]]


def create(settings: Settings, config: Mapping[str, Any], catalogue: Catalogue) -> DatabaseAdapter:
    """Open an engine per declared connection (seeding a missing example database), then
    check every database tool of ``catalogue`` against them: a bad name fails the start."""
    parsed = parse_config(config)
    opened: dict[str, DatabaseConnection] = {}
    try:
        for name, spec in parsed.connections.items():
            opened[name] = open_connection(name, spec, settings)
        problems = check_declarations(catalogue, parsed)
        if problems:
            raise ConfigError(problems)
    except BaseException:
        for conn in opened.values():
            conn.engine.dispose()
        raise
    return DatabaseAdapter(opened)


def check_declarations(catalogue: Catalogue, config: DatabaseConfig) -> list[str]:
    """The faults of the database tools in ``catalogue`` that only the configuration shows
    (unknown or read-only connections) or that cross keys (probes naming queries)."""
    connections = {name: spec.read_only for name, spec in config.connections.items()}
    problems: list[str] = []
    for tool in catalogue.all():
        if tool.adapter == SPEC.name:
            problems.extend(check_tool(tool, catalogue.lines(tool), connections))
    return problems


class DatabaseAdapter:
    """Declared SQL on the declared connections, one transaction per call."""

    name: ClassVar[str] = "database"

    def __init__(self, connections: Mapping[str, DatabaseConnection]) -> None:
        self.connections = dict(connections)

    async def execute(self, call: AdapterCall) -> AdapterOutcome:
        options = options_of(call.tool)
        conn = self._connection(options.connection)
        seconds = call.seconds_left()
        if seconds <= 0:
            raise ExecutionError(
                f"{call.tool.ref} has no time left before its deadline; nothing was started",
                code="deadline_exceeded",
                retryable=True,
            )
        binds = binds_for(options.sql, options, call)
        run = partial(run_transaction, conn, call.tool, seconds=seconds, cancelled=call.cancelled)
        try:
            if call.tool.operation == "execute":
                work = partial(_execute, options, binds, call.output_budget)
                return _executed(options, *await run(write=True, work=work))
            read = partial(_query, options.sql, binds, options.max_rows, call.output_budget)
            return _queried(options, *await run(write=False, work=read))
        except ExecutionError as exc:
            if exc.code != "cancelled":
                raise
            attempted = call.tool.side_effect not in READS  # settle reconciles a write
            return AdapterOutcome(
                Outcome.CANCELLED, error=exc, side_effect=Effect(attempted, False, exc.message)
            )

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        """``row_version``: the declared version query; ``query``: a declared read query,
        reduced to ``column`` (or its only column). No row is ``None``."""
        options = options_of(call.tool)
        sql = options.probe_sql(name, params)
        if sql is None:
            raise ExecutionError(
                f"{call.tool.ref} declares no query for probe {name!r} {dict(params)}",
                code="probe_unknown",
            )
        row = await run_transaction(
            self._connection(options.connection),
            call.tool,
            write=False,
            seconds=max(call.seconds_left(), PROBE_FLOOR),
            cancelled=anyio.Event(),  # a probe runs to its end: it decides an outcome
            work=partial(_first_row, sql, binds_for(sql, options, call)),
        )
        return _probe_value(row, params.get("column"), call.tool)

    def policy_view(self, tool: ToolDeclaration, context: Mapping[str, JSON]) -> dict[str, JSON]:
        """What the declared statement does (``input.action``): its kind and the tables it
        names, read from the declaration's SQL (the same for every call of the tool)."""
        options = options_of(tool)
        kind, tables = statement_view(options.sql)
        return {"connection": options.connection, "statement": kind, "tables": list(tables)}

    async def preview(self, call: AdapterCall) -> JSON:
        """The declared SQL and the values it would be bound to; nothing is sent."""
        options = options_of(call.tool)
        binds = binds_for(options.sql, options, call)
        return {
            "connection": options.connection,
            "operation": call.tool.operation,
            "sql": options.sql,
            "binds": {name: json_value(value) for name, value in sorted(binds.items())},
        }

    async def aclose(self) -> None:
        for conn in self.connections.values():
            await anyio.to_thread.run_sync(conn.engine.dispose)

    def _connection(self, name: str) -> DatabaseConnection:
        conn = self.connections.get(name)
        if conn is None:
            raise ExecutionError(
                f"the database connection {name!r} is not configured", code="config_invalid"
            )
        return conn


# -- values -------------------------------------------------------------------------------------


def json_value(value: Any) -> JSON:
    """A database value as JSON: exact decimals as text, times in ISO 8601, bytes in hex."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    return str(value)


def binds_for(sql: str, options: DatabaseOptions, call: AdapterCall) -> dict[str, Any]:
    """The values of the ``:name`` binds of ``sql``: a declared bind, else the argument (SQL
    NULL when an optional argument is absent; a list or an object as JSON text)."""
    values: dict[str, Any] = {}
    for name in bind_names(sql):
        template = options.binds.get(name)
        if template is not None:
            try:
                values[name] = template.render(call.context)
            except TemplateError as exc:
                raise ExecutionError(f"bind {name!r}: {exc}", code="bind_error") from exc
            continue
        value = call.arguments.get(name)
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            raise ValidationError(
                f"{call.tool.ref}: argument {name!r} is an integer outside the 64-bit range "
                f"the database binds ({INT64[0]} to {INT64[1]}); nothing was started",
                code="invalid_arguments",
                details={"errors": {name: ["integer out of the 64-bit range"]}},
            )
        values[name] = _canonical(value) if isinstance(value, list | dict) else value
    return values


def _canonical(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_AS_IS = (str, int, bool, type(None))
"""The column value types a row's JSON holds as they are (the rest go through ``json_value``)."""


def _row(columns: list[str], row: Iterable[Any]) -> dict[str, JSON]:
    return dict(zip(columns, [v if type(v) in _AS_IS else json_value(v) for v in row], strict=True))


def _json_size(value: JSON) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str))


def collect_rows(
    columns: list[str], rows: Iterable[Iterable[Any]], max_rows: int, budget: int
) -> tuple[Rows, bool]:
    """Rows as dicts, at most ``max_rows`` of them and ``budget`` bytes of JSON; and
    whether rows were left out."""
    out: Rows = []
    truncated = False
    for row in rows:
        if len(out) >= max_rows:
            truncated = True
            break
        out.append(_row(columns, row))
    if _json_size(out) <= budget:  # the common case: one encoding of the whole page
        return out, truncated
    used = 2
    for kept, item in enumerate(out):
        used += _json_size(item) + 1
        if used > budget:
            return out[:kept], True
    return out, True


# -- the work, on a worker thread inside a transaction -----------------------------------------


def _query(
    sql: str, binds: Mapping[str, Any], max_rows: int, budget: int, conn: Connection
) -> tuple[Rows, list[str], bool]:
    result = conn.execute(statement(sql), dict(binds))
    if not result.returns_rows:
        return [], [], False
    columns = list(map(str, result.keys()))
    rows, truncated = collect_rows(columns, result, max_rows, budget)
    result.close()
    return rows, columns, truncated


def _execute(
    options: DatabaseOptions, binds: Mapping[str, Any], budget: int, conn: Connection
) -> tuple[int, Rows | None, bool]:
    result = conn.execute(statement(options.sql), dict(binds))
    rows: Rows | None = None
    truncated = False
    if result.returns_rows:
        returned = result.fetchall()
        affected = len(returned)
        columns = list(map(str, result.keys()))
        rows, truncated = collect_rows(columns, returned, options.max_rows, budget)
    else:
        affected = result.rowcount
    if options.expect_rows is not None and affected != options.expect_rows:
        raise ExecutionError(
            f"the statement matched {affected} rows where the tool expects exactly "
            f"{options.expect_rows}; the transaction was rolled back: nothing changed",
            code="unexpected_row_count",
            details={"rows_affected": affected, "expect_rows": options.expect_rows},
        )
    return affected, rows, truncated


def _first_row(sql: str, binds: Mapping[str, Any], conn: Connection) -> dict[str, JSON] | None:
    result = conn.execute(statement(sql), dict(binds))
    columns = list(map(str, result.keys()))
    row = result.first()
    return None if row is None else _row(columns, row)


# -- results --------------------------------------------------------------------------------------


def _probe_value(row: dict[str, JSON] | None, column: str | None, tool: ToolDeclaration) -> JSON:
    if row is None:
        return None
    if column is None:
        return next(iter(row.values())) if len(row) == 1 else row
    if column not in row:
        raise ExecutionError(
            f"the probe query of {tool.ref} has no column {column!r} ({', '.join(row)})",
            code="probe_column",
        )
    return row[column]


def _queried(
    options: DatabaseOptions, rows: Rows, columns: list[str], truncated: bool
) -> AdapterOutcome:
    data = {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": truncated}
    evidence = Evidence(
        "query_result",
        f"db:{options.connection}",
        _sha256(_canonical(rows)),
        {"row_count": len(rows), "truncated": truncated},
    )
    more = ", truncated" if truncated else ""
    return AdapterOutcome(
        Outcome.SUCCEEDED,
        data=data,
        side_effect=Effect(False, False, f"read {len(rows)} rows from {options.connection}{more}"),
        evidence=(evidence,),
        truncated=truncated,
    )


def _executed(
    options: DatabaseOptions, affected: int, rows: Rows | None, truncated: bool
) -> AdapterOutcome:
    data: dict[str, JSON] = {"rows_affected": affected}
    if rows is not None:
        data.update(rows=rows, truncated=truncated)
    evidence = Evidence(
        "sql_execute",
        f"db:{options.connection}",
        _sha256(_canonical(data)),
        {"rows_affected": affected, "statement_sha256": _sha256(options.sql)},
    )
    summary = f"committed: {affected} rows affected on {options.connection}"
    return AdapterOutcome(
        Outcome.SUCCEEDED,
        data=data,
        side_effect=Effect(True, affected != 0, summary),
        evidence=(evidence,),
        truncated=truncated,
    )
