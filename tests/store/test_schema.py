"""The schema's DDL, on both dialects, is the one recorded in ``schema.sql``: a change of a
column, index or constraint shows here first, and needs ``SCHEMA_VERSION`` and a migration
(``gateway/store/migrations.py``). Regenerate after such a change with
``python -m tests.store.test_schema > tests/store/schema.sql``."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from gateway.store.tables import SCHEMA_VERSION, TABLES

RECORDED = Path(__file__).with_name("schema.sql")


def ddl() -> str:
    out = [f"-- schema version {SCHEMA_VERSION}"]
    for dialect in (sqlite.dialect(), postgresql.dialect()):
        out.append(f"-- {dialect.name}")
        for table in TABLES:
            out.append(str(CreateTable(table).compile(dialect=dialect)).strip() + ";")
            for index in sorted(table.indexes, key=lambda i: str(i.name)):
                out.append(str(CreateIndex(index).compile(dialect=dialect)).strip() + ";")
    return "\n".join(out) + "\n"


def test_the_ddl_is_the_recorded_one() -> None:
    assert ddl() == RECORDED.read_text()


def test_the_python_side_defaults_are_kept() -> None:
    """Columns the store's inserts may leave out get the same defaults as before."""
    defaults = {
        (t.name, c.name): c.default.arg  # type: ignore[union-attr]
        for t in TABLES
        for c in t.columns
        if c.default is not None
    }
    assert defaults[("executions", "agent_id")] == ""
    assert defaults[("approvals", "arguments_json")] == "{}"
    assert defaults[("approvals", "preview_json")] == "null"
    assert defaults[("audit_checkpoints", "writer")] == ""


if __name__ == "__main__":
    print(ddl(), end="")
