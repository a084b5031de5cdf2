"""The database adapter's declaration keys, and the checks that need the configuration.

``DatabaseOptions`` is checked when a declaration loads: SQL is one statement with ``:name``
binds and never a template (``{arguments.x}`` would splice text into SQL), and every bind is
an argument the ``input`` schema declares or a declared ``binds`` template. ``check_tool``
runs at the gateway's start, when the configured connections are known.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, StringConstraints, WithJsonSchema

from gateway.declarations.model import TemplateStr, ToolDeclaration
from gateway.declarations.templates import Template, compile_template
from gateway.errors import ExecutionError
from gateway.types import SideEffect
from gateway.yamlsrc import Lines

if TYPE_CHECKING:
    import sqlalchemy as sa

Loc = tuple[str | int, ...]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
READS = frozenset({SideEffect.NONE, SideEffect.READ})
# A template hole as gateway.declarations.templates reads one: {path} or {fn(path)}.
_HOLE = re.compile(r"\{\s*[A-Za-z_][\w.*]*\s*(?:\([^{}]*\))?\s*\}")
_MIGRATION_LOCK = re.compile(r"^db:([^:{}]+):migrations$")
# What may hide a ";" that does not end a statement: literals, quoted names, comments.
_NOT_CODE = re.compile(
    r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|--[^\n]*|/\*.*?\*/|\$(\w*)\$.*?\$\1\$",
    re.S,
)
PROBE_PARAMETERS = {"row_version": frozenset(), "query": frozenset({"query", "column"})}


@functools.lru_cache(maxsize=1024)
def statement(sql: str) -> sa.TextClause:
    """The ``text()`` construct of a declared statement (cached: parsing it costs).

    SQLAlchemy is imported here, when a database declaration is first checked: the
    declaration spec imports this module, and importing the loader imports no engine."""
    import sqlalchemy as sa

    return sa.text(sql)


@functools.lru_cache(maxsize=1024)
def bind_names(sql: str) -> tuple[str, ...]:
    """The ``:name`` bind parameters of ``sql``, in order of first use."""
    return tuple(statement(sql).compile().params)


def _sql(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be one SQL statement (a non-empty string)")
    faults = []
    hole = _HOLE.search(value)
    if hole:
        faults.append(
            f"SQL is never a template: {hole.group(0)} would splice text into the statement; "
            "bind values as :name parameters instead (arguments are bound by name)"
        )
    if ";" in _NOT_CODE.sub(" ", value).strip().rstrip(";"):
        faults.append("must be one SQL statement: declare one tool per statement")
    if faults:  # every fault of the statement at once, not one per run of check
        raise ValueError("; and ".join(faults))
    bind_names(value.strip())
    return value.strip()


SqlText = Annotated[
    str,
    PlainValidator(_sql),
    WithJsonSchema({"type": "string", "description": "one SQL statement with :name binds"}),
]


def _argument_ref(name: str) -> Template:
    """A stand-in template for bind ``:name``, so the loader checks it against ``input``."""
    return replace(compile_template(f"{{arguments.{name}}}"), source=f":{name}")


class DatabaseOptions(BaseModel):
    """The database adapter's keys of a tool declaration (docs/adapters/database.md)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, use_attribute_docstrings=True
    )

    connection: Name
    """A connection declared in ``adapters.database.connections`` of the configuration."""
    sql: SqlText
    """The statement; ``:name`` binds come from ``binds``, else from the arguments."""
    binds: dict[Name, TemplateStr] = Field(default_factory=dict)
    """Extra bind values rendered from templates (``{actor.user_id}``), bound as strings."""
    max_rows: int = Field(default=100, ge=1, le=10_000)
    """At most this many rows are returned (``query`` rows, ``RETURNING`` rows)."""
    expect_rows: int | None = Field(default=None, ge=0)
    """``execute`` only: any other number of affected rows rolls the transaction back."""
    row_version: SqlText | None = None
    """The version query behind the ``row_version`` probe (its first value)."""
    queries: dict[Name, SqlText] = Field(default_factory=dict)
    """Named read queries for ``query`` probes (verify, reconcile, state guards)."""

    def statements(self) -> Iterator[tuple[Loc, str]]:
        """Every declared SQL statement with its location in the declaration."""
        yield ("sql",), self.sql
        if self.row_version is not None:
            yield ("row_version",), self.row_version
        for name, sql in self.queries.items():
            yield ("queries", name), sql

    def templates(self) -> Iterator[tuple[Loc, Template]]:
        """For the loader: the ``binds`` templates, and every bind not in ``binds`` as
        ``arguments.<name>`` (so a bind that ``input`` does not declare is a load error)."""
        for name, template in self.binds.items():
            yield ("binds", name), template
        for loc, sql in self.statements():
            for name in bind_names(sql):
                if name not in self.binds:
                    yield loc, _argument_ref(name)

    def fills_absent(self, loc: Loc, template: Template) -> bool:
        """A bind taken from the arguments is NULL when the argument is absent; a ``binds``
        template with no value fails the call."""
        return loc[0] != "binds" and template.source.startswith(":")

    def probe_sql(self, name: str, params: Mapping[str, str]) -> str | None:
        """The SQL behind probe ``name`` (``row_version`` or ``query``), if declared."""
        if name == "row_version":
            return self.row_version
        if name == "query":
            return self.queries.get(params.get("query", ""))
        return None


def options_of(tool: ToolDeclaration) -> DatabaseOptions:
    options = tool.options
    if not isinstance(options, DatabaseOptions):
        raise ExecutionError(f"{tool.ref} is not a database tool", code="adapter_mismatch")
    return options


# -- checks at the gateway's start ----------------------------------------------------------


def check_tool(
    tool: ToolDeclaration, lines: Lines, connections: Mapping[str, bool]
) -> Iterator[str]:
    """Faults of one database tool that need the configured ``connections`` (name →
    read-only?) or cross several keys; each names the file, the line and the key."""
    options = options_of(tool)
    read_only = connections.get(options.connection)
    if read_only is None:
        known = ", ".join(sorted(connections)) or "none"
        yield (
            f"{lines.where(('connection',))}: connection {options.connection!r} is not declared "
            f"in adapters.database.connections of the gateway configuration (declared: {known})"
        )
    elif read_only and tool.side_effect not in READS:
        yield (
            f"{lines.where(('connection',))}: connection {options.connection!r} is read-only; "
            f"a {tool.side_effect.value} tool cannot use it"
        )
    if tool.operation != "execute" and options.expect_rows is not None:
        yield f"{lines.where(('expect_rows',))}: expect_rows applies to operation execute only"
    for name in sorted(set(options.binds) & set(tool.input)):
        yield f"{lines.where(('binds', name))}: bind {name!r} would hide the argument {name!r}"
    yield from _check_reads(tool, options, lines)
    yield from _check_probes(tool, options, lines)
    yield from _check_locks(tool, connections, lines)


# -- is a statement a read? ------------------------------------------------------------------
#
# A conservative look at the statement's words, with literals, quoted names and comments
# blanked out first (``_NOT_CODE``): no SQL parser, and nothing it says "read" is taken on
# trust at run time (reads still run in a read-only transaction). A statement is a read when
# it starts with a reading keyword and nowhere holds a writing keyword, a data-modifying CTE,
# a locking clause or a call of a function known to write; anything else that is not clearly
# a write cannot be classified, and is refused for a read tool like a write.

READ_LEADS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "SHOW", "EXPLAIN"})
WRITE_WORDS = frozenset(
    {"INSERT", "UPDATE", "DELETE", "MERGE", "UPSERT", "REPLACE", "INTO"}
    | {"CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT", "REVOKE"}
)
"""Reserved words that only a writing statement (or SELECT ... INTO, FOR UPDATE) holds."""
WRITE_FUNCTIONS = frozenset(
    {"NEXTVAL", "SETVAL", "DBLINK_EXEC", "QUERY_TO_XML", "QUERY_TO_XML_AND_XMLSCHEMA"}
    | {"PG_ADVISORY_XACT_LOCK", "PG_ADVISORY_LOCK", "SET_CONFIG", "LOAD_EXTENSION"}
)
"""Functions that change state (a sequence, a large object, a lock, a setting) or run SQL
given as text; every ``lo_*`` function counts too."""
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*|\S")


def _blank(match: re.Match[str]) -> str:
    """A comment is nothing; a literal or a quoted name is one opaque token."""
    return " " if match.group(0).startswith(("--", "/*")) else " ? "


def _tokens(sql: str) -> list[str]:
    return [t.upper() for t in _WORD.findall(_NOT_CODE.sub(_blank, sql))]


def classify(sql: str) -> tuple[str, str]:
    """("read" | "write" | "unknown", why) for one statement."""
    tokens = _tokens(sql)
    for i, token in enumerate(tokens):
        call = i + 1 < len(tokens) and tokens[i + 1] == "("
        if call and (token in WRITE_FUNCTIONS or token.startswith("LO_")):
            return "write", f"it calls {token.lower()}(), which writes"
        if token in WRITE_WORDS and not call:  # replace(), insert() are string functions
            return "write", f"it holds {token}"
        if token == "FOR" and "SHARE" in tokens[i + 1 : i + 4]:
            return "write", "it locks rows (FOR SHARE)"
    lead = next((t for t in tokens if t != "("), "")
    if lead in READ_LEADS:
        return "read", ""
    return "unknown", f"it starts with {lead or 'nothing'}, not a reading keyword"


# -- what a statement does, for the policy ----------------------------------------------------
#
# The same look at the words (no SQL parser): the statement kind is the leading keyword (after a
# WITH clause's common table expressions, the statement they lead to), and the tables are the
# names after FROM, JOIN, INTO, UPDATE, USING and TABLE, outside function calls (``extract(year
# FROM d)`` names no table) and without the names a WITH clause defines. Unquoted names are
# lowercased; a quoted name keeps its case; ``schema.table`` stays qualified.

STATEMENT_WORDS = frozenset(
    {"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "TABLE", "SHOW", "EXPLAIN"}
    | {"CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT", "REVOKE", "REPLACE", "UPSERT", "CALL"}
)
_TABLE_LEADS = frozenset({"FROM", "JOIN", "INTO", "UPDATE", "USING", "TABLE"})
_QUERY_STARTS = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})
_LITERALS_AND_COMMENTS = re.compile(
    r"'(?:[^'\\]|\\.|'')*'|--[^\n]*|/\*.*?\*/|\$(\w*)\$.*?\$\1\$", re.S
)
_NAME_TOKEN = re.compile(r'"((?:[^"]|"")*)"|`([^`]*)`|([A-Za-z_][A-Za-z0-9_$]*)|(\S)')


@functools.lru_cache(maxsize=1024)
def statement_view(sql: str) -> tuple[str, tuple[str, ...]]:
    """(the statement kind, lowercase: ``select``, ``insert``, ``update``, ``delete``, ...;
    the tables the statement names, sorted) of one declared statement."""
    words: list[tuple[str, str]] = []  # (upper-cased word or symbol, the name as written)
    for match in _NAME_TOKEN.finditer(_LITERALS_AND_COMMENTS.sub(" ? ", sql)):
        quoted, ticked, word, symbol = match.groups()
        if word is not None:
            words.append((word.upper(), word.lower()))
        elif symbol is not None:
            words.append((symbol, symbol))
        else:
            name = quoted.replace('""', '"') if quoted is not None else ticked
            words.append(('"', name))
    return _statement_kind(words), tuple(sorted(_tables(words)))


def _statement_kind(words: list[tuple[str, str]]) -> str:
    depth, lead = 0, next((w for w, _ in words if w != "("), "")
    if lead != "WITH":
        return lead.lower()
    for word, _ in words[1:]:  # the statement the common table expressions lead to
        depth += (word == "(") - (word == ")")
        if depth == 0 and word in STATEMENT_WORDS:
            return word.lower()
    return "with"


def _tables(words: list[tuple[str, str]]) -> set[str]:
    found: set[str] = set()
    defined: set[str] = set()  # the names of common table expressions
    query = [True]  # per open parenthesis: does it hold a query (not a function's arguments)?
    for i, (word, _) in enumerate(words):
        if word == "(":
            query.append(i + 1 < len(words) and words[i + 1][0] in _QUERY_STARTS)
        elif word == ")" and len(query) > 1:
            query.pop()
        elif word == "AS" and i > 0 and i + 1 < len(words) and words[i + 1][0] == "(":
            defined.add(words[i - 1][1])
        elif word in _TABLE_LEADS and query[-1] and (i == 0 or words[i - 1][0] != "FOR"):
            found.update(_names_after(words, i + 1, columns=word == "INTO"))
    return found - defined


def _names_after(words: list[tuple[str, str]], i: int, columns: bool) -> Iterator[str]:
    """The table names of a list at ``words[i:]``: ``a``, ``s.b AS x, c y``; with ``columns``
    (after INTO) a name followed by ``(`` is a table and its column list, else a function."""
    while i < len(words) and (words[i][0] == '"' or words[i][0][:1].isalpha()):
        if words[i][0] in _CLAUSE_WORDS:
            return
        if words[i][0] in _TABLE_LEADS or words[i][0] in {"ONLY", "LATERAL"}:
            i += 1  # DELETE FROM ONLY t, INSERT INTO TABLE ...
            continue
        name = words[i][1]
        i += 1
        while i + 1 < len(words) and words[i][0] == "." and words[i + 1][0] != "(":
            name, i = f"{name}.{words[i + 1][1]}", i + 2
        if i < len(words) and words[i][0] == "(":
            if columns:
                yield name
            return
        yield name
        if i < len(words) and words[i][0] == "AS":
            i += 1
        if i < len(words) and words[i][0] not in _CLAUSE_WORDS and words[i][0] != ",":
            i += 1  # an alias
        if i >= len(words) or words[i][0] != ",":
            return
        i += 1


_CLAUSE_WORDS = frozenset(
    {"WHERE", "SET", "ON", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL", "GROUP"}
    | {"ORDER", "LIMIT", "OFFSET", "HAVING", "UNION", "EXCEPT", "INTERSECT", "RETURNING", "VALUES"}
    | {"SELECT", "USING", "WINDOW", "FOR", "DEFAULT", "(", ")", ";", "OUTER", "FETCH", "AS"}
)


def _check_reads(tool: ToolDeclaration, options: DatabaseOptions, lines: Lines) -> Iterator[str]:
    """A read tool's SQL, and every probe query of any tool, must classify as a read (they
    run in a read-only transaction, which would refuse them only at run time)."""
    for loc, sql in options.statements():
        if loc == ("sql",) and tool.side_effect not in READS:
            continue
        kind, why = classify(sql)
        if kind == "read":
            continue
        what = f"a {tool.side_effect.value} tool's SQL" if loc == ("sql",) else "a probe's query"
        verdict = "writes" if kind == "write" else "cannot be classified as a read"
        yield (
            f"{lines.where(loc)}: {what} must only read, and this statement {verdict} ({why}); "
            "declare the tool operation: execute with side_effect: write, or make it a SELECT"
        )


def _probe_uses(tool: ToolDeclaration) -> Iterator[tuple[Loc, str, Mapping[str, Template]]]:
    for field in ("verify", "reconcile"):
        for i, probe in enumerate(getattr(tool, field)):
            yield (field, i), probe.probe, probe.params
    for i, guard in enumerate(tool.state_guards):
        yield ("state_guards", i), guard.actual, guard.params


def _check_probes(tool: ToolDeclaration, options: DatabaseOptions, lines: Lines) -> Iterator[str]:
    for loc, name, params in _probe_uses(tool):
        for extra in sorted(set(params) - PROBE_PARAMETERS.get(name, frozenset())):
            yield f"{lines.where((*loc, extra))}: probe {name!r} has no parameter {extra!r}"
        if name == "row_version" and options.row_version is None:
            yield f"{lines.where(loc)}: probe 'row_version' needs the row_version query declared"
        query = params.get("query")
        if name != "query" or query is None:
            continue
        if query.references:
            yield f"{lines.where((*loc, 'query'))}: the query name must be literal"
        elif query.source not in options.queries:
            known = ", ".join(sorted(options.queries)) or "none"
            yield (
                f"{lines.where((*loc, 'query'))}: query {query.source!r} is not declared in "
                f"queries ({known})"
            )


def _check_locks(
    tool: ToolDeclaration, connections: Mapping[str, bool], lines: Lines
) -> Iterator[str]:
    for i, lock in enumerate(tool.locks):
        match = _MIGRATION_LOCK.match(lock.key.source)
        if match and match.group(1) not in connections:
            yield (
                f"{lines.where(('locks', i, 'key'))}: {lock.key.source!r} is the migration lane "
                f"of {match.group(1)!r}, which is not a declared connection"
            )
