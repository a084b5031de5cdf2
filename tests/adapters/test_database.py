"""The database adapter against real SQLite, PostgreSQL and MariaDB, and through the whole API.

PostgreSQL (127.0.0.1:5432) and MariaDB (127.0.0.1:3306, root without a password) tests make a
database of their own and drop it afterwards. Off CI a missing server skips them with the
reason; in CI (CI=true) a missing server fails them.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
import yaml
from starlette.testclient import TestClient

from gateway.adapters.base import AdapterCall
from gateway.adapters.database import adapter as database
from gateway.adapters.database import engines
from gateway.adapters.database.adapter import DatabaseAdapter
from gateway.adapters.database.engines import ConnectionConfig
from gateway.adapters.database.errors import category
from gateway.adapters.database.options import DatabaseOptions, check_tool
from gateway.declarations.catalogue import Catalogue
from gateway.errors import CallError, ConfigError, ExecutionError
from gateway.server.app import create_app
from gateway.settings import Settings, load_settings
from gateway.testing import catalogue_of, load_catalogue, load_declaration
from gateway.types import Outcome
from gateway.workspace import Workspace
from tests.helpers import IN_CI, REPO, until

pytestmark = pytest.mark.anyio
MARIADB_HOST = os.environ.get("TOOLGATE_TEST_MARIADB_HOST", "127.0.0.1")

SCHEMA = """
CREATE TABLE items (
    id INTEGER PRIMARY KEY,
    name VARCHAR(100) NOT NULL UNIQUE,
    qty INTEGER NOT NULL CHECK (qty >= 0),
    version INTEGER NOT NULL DEFAULT 1
)
"""
SLOW_SQL = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
    "WHERE x < 10000000000) SELECT count(*) AS n FROM c",
    "postgresql": "SELECT pg_sleep(30) AS n",
    "mysql": "SELECT SUM(a.seq * b.seq) AS n FROM seq_1_to_1000000 a, seq_1_to_1000000 b",
}
SNEAKY = """\
name: t.sneaky_write
version: 1.0.0
description: a read tool whose SQL writes
adapter: database
operation: query
connection: shop
risk: low
side_effect: read
input: {id: {type: integer, required: true}}
sql: UPDATE items SET qty = 0 WHERE id = :id
"""
"""The start checks refuse it (test_a_read_tool_whose_sql_writes_fails_the_check); the
fixture adds it after them, to test the read-only transaction behind that check."""
TOOLS = """
name: t.list_items
version: 1.0.0
description: items with at least min_qty, by id
adapter: database
operation: query
connection: shop
risk: low
side_effect: read
input: {{min_qty: {{type: integer, default: 0}}}}
sql: SELECT id, name, qty, version FROM items WHERE qty >= :min_qty ORDER BY id
max_rows: 5
---
name: t.find_item
version: 1.0.0
description: one item by name
adapter: database
operation: query
connection: shop
risk: low
side_effect: read
input: {{name: {{type: string, required: true}}}}
sql: SELECT id, name, qty FROM items WHERE name = :name
---
name: t.slow
version: 1.0.0
description: a query that runs for a long time
adapter: database
operation: query
connection: shop
risk: low
side_effect: read
sql: "{slow}"
---
name: t.take
version: 1.0.0
description: take n of one item
adapter: database
operation: execute
connection: shop
risk: medium
side_effect: write
input:
  id: {{type: integer, required: true}}
  n: {{type: integer, required: true}}
sql: UPDATE items SET qty = qty - :n, version = version + 1 WHERE id = :id
expect_rows: 1
row_version: SELECT version FROM items WHERE id = :id
queries:
  item: SELECT qty, version FROM items WHERE id = :id
  qty: SELECT qty FROM items WHERE id = :id
---
name: t.restock
version: 1.0.0
description: add one to every item with at least min_qty
adapter: database
operation: execute
connection: shop
risk: medium
side_effect: write
input: {{min_qty: {{type: integer, required: true}}}}
sql: UPDATE items SET qty = qty + 1 WHERE qty >= :min_qty
---
name: t.add
version: 1.0.0
description: add an item, recording who did
adapter: database
operation: execute
connection: shop
risk: medium
side_effect: write
input:
  id: {{type: integer, required: true}}
  name: {{type: string, required: true}}
binds: {{qty: "{{actor.user_id}}"}}
sql: INSERT INTO items (id, name, qty) VALUES (:id, :name, :qty) RETURNING id, name, qty
---
name: t.typo
version: 1.0.0
description: SQL with a syntax error
adapter: database
operation: execute
connection: shop
risk: medium
side_effect: write
sql: UPDAT items SET qty = 1
"""


# -- servers and databases ------------------------------------------------------------------


def _mariadb_admin() -> Any:
    import pymysql

    return pymysql.connect(
        host=MARIADB_HOST, port=3306, user="root", password="", connect_timeout=3, autocommit=True
    )


@pytest.fixture(scope="session")
def mariadb_server() -> str:
    """The MariaDB server, or a skip (a failure in CI) saying why it is missing."""
    try:
        with closing(_mariadb_admin()) as conn, conn.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        reason = f"MariaDB on {MARIADB_HOST}:3306 does not answer ({exc})"
        if IN_CI:
            pytest.fail(f"{reason}; CI requires it", pytrace=False)
        pytest.skip(reason)
    return f"mysql+pymysql://root@{MARIADB_HOST}:3306"


@pytest.fixture
def mariadb_url(mariadb_server: str) -> Iterator[str]:
    name = f"toolgate_test_{uuid.uuid4().hex[:12]}"
    with closing(_mariadb_admin()) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    try:
        yield f"{mariadb_server}/{name}"
    finally:
        with closing(_mariadb_admin()) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "mariadb"])
def shop_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shop.db'}"
    fixture = "pg_url" if request.param == "postgres" else "mariadb_url"
    url: str = request.getfixturevalue(fixture)
    return url


@dataclass
class Shop:
    """A real database with ten items, the adapter on it and the test tools."""

    adapter: DatabaseAdapter
    catalogue: Catalogue
    engine: sa.Engine
    workspace: Workspace

    def call(
        self, tool: str, seconds: float = 10, budget: int | None = None, **arguments: Any
    ) -> AdapterCall:
        decl = self.catalogue.resolve(tool)
        validator = self.catalogue.validator(decl)
        assert validator.validate(arguments), validator.errors
        normalised = dict(validator.document)
        return AdapterCall(
            execution_id="ex_test",
            tool=decl,
            arguments=normalised,
            workspace=self.workspace,
            paths={},
            deadline=time.time() + seconds,
            cancelled=anyio.Event(),
            fencing_tokens={},
            output_budget=budget or decl.output_budget,
            context={
                "arguments": normalised,
                "workspace": self.workspace.to_json(),
                "actor": {"user_id": "42", "agent_id": "coder"},
            },
        )

    def value(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.text(sql), params).scalar()

    def state(self) -> list[tuple[Any, ...]]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text("SELECT * FROM items ORDER BY id"))]


def write_tools(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for i, doc in enumerate(text.strip().split("\n---\n")):
        name = doc.split("\n", 1)[0].removeprefix("name: ").strip()
        (directory / f"{i:02d}.{name}.yaml").write_text(doc + "\n")
    return directory


def shop_settings(tmp_path: Path, tools_dir: Path, url: str, **connection: Any) -> Settings:
    spec: Any = {"url": url, **connection} if connection else url
    return Settings.model_validate(
        {
            "base_dir": tmp_path,
            "tools_dir": tools_dir,
            "adapters": {"database": {"connections": {"shop": spec}}},
        }
    )


@pytest.fixture
def shop(shop_url: str, tmp_path: Path) -> Iterator[Shop]:
    engine = sa.create_engine(shop_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(SCHEMA)
        conn.execute(
            sa.text("INSERT INTO items (id, name, qty) VALUES (:id, :name, :qty)"),
            [{"id": i, "name": f"item-{i}", "qty": i} for i in range(1, 11)],
        )
    tools_dir = write_tools(tmp_path / "tools.d", TOOLS.format(slow=SLOW_SQL[engine.dialect.name]))
    settings = shop_settings(tmp_path, tools_dir, shop_url)
    adapter = database.create(settings, settings.adapters["database"], catalogue_of(settings))
    (tools_dir / "99.t.sneaky_write.yaml").write_text(SNEAKY)
    root = tmp_path / "ws"
    root.mkdir()
    try:
        yield Shop(adapter, load_catalogue(tools_dir), engine, Workspace("demo", root))
    finally:
        for conn in adapter.connections.values():
            conn.engine.dispose()
        engine.dispose()


# -- query ----------------------------------------------------------------------------------


async def test_query_returns_rows_within_the_row_budget(shop: Shop) -> None:
    out = await shop.adapter.execute(shop.call("t.list_items", min_qty=2))
    assert out.outcome is Outcome.SUCCEEDED
    assert out.truncated is True
    assert out.data["columns"] == ["id", "name", "qty", "version"]
    assert [r["id"] for r in out.data["rows"]] == [2, 3, 4, 5, 6]  # max_rows: 5 of 9
    assert out.data["rows"][0] == {"id": 2, "name": "item-2", "qty": 2, "version": 1}
    assert out.side_effect.attempted is False
    assert out.evidence[0].kind == "query_result" and out.evidence[0].data["row_count"] == 5
    few = await shop.adapter.execute(shop.call("t.list_items", min_qty=9))
    assert few.truncated is False and few.data["row_count"] == 2


async def test_query_stays_within_the_output_budget(shop: Shop) -> None:
    out = await shop.adapter.execute(shop.call("t.list_items", budget=120))
    assert out.truncated is True
    assert 1 <= out.data["row_count"] < 5


async def test_injection_through_arguments_is_inert(shop: Shop) -> None:
    before = shop.state()
    for name in ("x' OR '1'='1", "item-1'; DROP TABLE items; --", "item-1' --"):
        out = await shop.adapter.execute(shop.call("t.find_item", name=name))
        assert out.data["rows"] == []
    hostile = "'); DELETE FROM items; --"
    added = await shop.adapter.execute(shop.call("t.add", id=99, name=hostile))
    assert added.data["rows"] == [{"id": 99, "name": hostile, "qty": 42}]
    assert shop.state() == [*before, (99, hostile, 42, 1)]


# -- execute --------------------------------------------------------------------------------


async def test_execute_commits_and_reports_rows_affected(shop: Shop) -> None:
    out = await shop.adapter.execute(shop.call("t.restock", min_qty=8))
    assert out.outcome is Outcome.SUCCEEDED
    assert out.data == {"rows_affected": 3}
    assert out.side_effect.committed is True
    assert out.evidence[0].kind == "sql_execute"
    assert shop.value("SELECT SUM(qty) FROM items") == 55 + 3
    none = await shop.adapter.execute(shop.call("t.restock", min_qty=1000))
    assert none.data == {"rows_affected": 0} and none.side_effect.committed is False


async def test_execute_returns_returning_rows_and_binds_templates(shop: Shop) -> None:
    out = await shop.adapter.execute(shop.call("t.add", id=11, name="new"))
    assert out.data["rows_affected"] == 1
    assert out.data["rows"] == [{"id": 11, "name": "new", "qty": 42}]  # qty from actor.user_id


async def test_the_preview_is_the_sql_and_its_binds_and_changes_nothing(shop: Shop) -> None:
    shown = await shop.adapter.preview(shop.call("t.add", id=12, name="planned"))
    assert "INSERT" in shown["sql"].upper() and shown["operation"] == "execute", shown
    assert shown["binds"]["id"] == 12 and shown["binds"]["name"] == "planned"
    assert shop.value("SELECT COUNT(*) FROM items WHERE id = 12") == 0


async def test_expect_rows_mismatch_rolls_back(shop: Shop) -> None:
    with pytest.raises(ExecutionError) as caught:
        await shop.adapter.execute(shop.call("t.take", id=404, n=1))
    assert caught.value.code == "unexpected_row_count"
    assert "nothing changed" in caught.value.message


async def test_read_tool_cannot_write(shop: Shop) -> None:
    before = shop.state()
    with pytest.raises(ExecutionError) as caught:
        await shop.adapter.execute(shop.call("t.sneaky_write", id=3))
    error = caught.value
    assert error.code == "read_only_violation", error.message
    assert error.retryable is False
    assert "read-only" in error.message
    assert shop.state() == before


async def test_sql_error_is_clear_and_changes_nothing(shop: Shop) -> None:
    before = shop.state()
    with pytest.raises(ExecutionError) as caught:
        await shop.adapter.execute(shop.call("t.typo"))
    error = caught.value
    assert (error.code, error.retryable) == ("sql_error", False)
    assert error.message.startswith("the database rejected the SQL of t.typo@1.0.0: ")
    assert "syntax" in error.message.lower()
    assert "Traceback" not in error.message and "[SQL:" not in error.message
    assert shop.state() == before


async def test_constraint_violation_is_final_and_rolled_back(shop: Shop) -> None:
    before = shop.state()
    with pytest.raises(ExecutionError) as caught:
        await shop.adapter.execute(shop.call("t.take", id=2, n=5))  # qty would be -3
    assert (caught.value.code, caught.value.retryable) == ("constraint_violation", False)
    assert "rolled back: nothing changed" in caught.value.message
    with pytest.raises(ExecutionError) as duplicate:
        await shop.adapter.execute(shop.call("t.add", id=50, name="item-1"))
    assert duplicate.value.code == "constraint_violation"
    assert shop.state() == before


# -- probes ---------------------------------------------------------------------------------


async def test_probes_read_row_version_and_declared_queries(shop: Shop) -> None:
    call = shop.call("t.take", id=3, n=1)
    assert await shop.adapter.probe("row_version", {}, call) == 1
    await shop.adapter.execute(call)
    assert await shop.adapter.probe("row_version", {}, call) == 2
    assert await shop.adapter.probe("query", {"query": "qty"}, call) == 2
    assert await shop.adapter.probe("query", {"query": "item", "column": "version"}, call) == 2
    assert await shop.adapter.probe("query", {"query": "item"}, call) == {"qty": 2, "version": 2}
    missing = shop.call("t.take", id=404, n=1)
    assert await shop.adapter.probe("row_version", {}, missing) is None
    with pytest.raises(ExecutionError):
        await shop.adapter.probe("query", {"query": "item", "column": "nope"}, call)


async def test_probes_still_run_after_the_deadline(shop: Shop) -> None:
    call = shop.call("t.take", seconds=-1, id=3, n=1)  # reconcile runs past the deadline
    assert await shop.adapter.probe("row_version", {}, call) == 1


# -- deadlines, cancellation, unavailable servers --------------------------------------------


async def test_deadline_stops_the_statement(shop: Shop) -> None:
    started = time.monotonic()
    with pytest.raises(ExecutionError) as caught:
        await shop.adapter.execute(shop.call("t.slow", seconds=1))
    assert (caught.value.code, caught.value.retryable) == ("statement_timeout", True)
    assert time.monotonic() - started < 4


async def test_cancel_interrupts_the_statement(shop: Shop) -> None:
    call = shop.call("t.slow", seconds=20)
    running = _running_slow(shop)

    async def cancel_soon() -> None:  # once the statement runs: in flight, not before
        await until(running, "the slow statement running")
        call.cancelled.set()

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_soon)
        out = await shop.adapter.execute(call)
    assert out.outcome is Outcome.CANCELLED
    assert out.error is not None and out.error.code == "cancelled"
    assert time.monotonic() - started < 4


def _running_slow(shop: Shop) -> Callable[[], bool]:
    """Whether the database runs ``t.slow``'s statement: its server's view of the sessions
    (PostgreSQL, MariaDB); SQLite, in process, has none: the driver was handed it."""
    slow = SLOW_SQL[shop.engine.dialect.name]
    seen = {
        "postgresql": "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = :q",
        "mysql": "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO = :q",
    }.get(shop.engine.dialect.name)
    if seen is not None:
        return lambda: bool(shop.value(seen, q=slow))
    handed: list[str] = []
    engine = shop.adapter.connections["shop"].engine
    sa.event.listen(engine, "before_cursor_execute", lambda *args: handed.append(args[2]))
    return lambda: slow in handed


async def test_cancelled_before_start_changes_nothing(shop: Shop) -> None:
    before = shop.state()
    call = shop.call("t.take", id=3, n=1)
    call.cancelled.set()
    out = await shop.adapter.execute(call)
    assert out.outcome is Outcome.CANCELLED
    assert (out.side_effect.attempted, out.side_effect.committed) == (True, False)
    assert shop.state() == before


async def test_sqlite_writer_busy_is_retryable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(SCHEMA)
        conn.exec_driver_sql("INSERT INTO items (id, name, qty) VALUES (1, 'a', 5)")
    tools_dir = write_tools(tmp_path / "tools.d", TOOLS.format(slow=SLOW_SQL["sqlite"]))
    settings = shop_settings(tmp_path, tools_dir, url)
    shop = Shop(
        database.create(settings, settings.adapters["database"], catalogue_of(settings)),
        load_catalogue(tools_dir),
        engine,
        Workspace("demo", tmp_path),
    )
    holder = engine.raw_connection()
    try:
        holder.driver_connection.isolation_level = None  # type: ignore[union-attr]
        holder.cursor().execute("BEGIN IMMEDIATE")  # another writer holds the lock
        with pytest.raises(ExecutionError) as caught:
            await shop.adapter.execute(shop.call("t.take", seconds=1, id=1, n=1))
        assert (caught.value.code, caught.value.retryable) == ("database_conflict", True)
    finally:
        holder.close()
        await shop.adapter.aclose()
        engine.dispose()
    assert shop.value("SELECT qty FROM items") == 5


@pytest.mark.parametrize(
    "url", ["postgresql://shop@127.0.0.1:1/shop", "mysql://shop@127.0.0.1:1/x"]
)
async def test_unreachable_server_is_retryable_without_credentials(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TG_TEST_SHOP_PASSWORD", "s3cret-Pa55")
    tools_dir = write_tools(tmp_path / "tools.d", TOOLS.format(slow="SELECT 1"))
    settings = shop_settings(tmp_path, tools_dir, url, password_env="TG_TEST_SHOP_PASSWORD")
    adapter = database.create(settings, settings.adapters["database"], catalogue_of(settings))
    catalogue = load_catalogue(tools_dir)
    shop = Shop(adapter, catalogue, sa.create_engine("sqlite://"), Workspace("demo", tmp_path))
    try:
        with pytest.raises(ExecutionError) as caught:
            await adapter.execute(shop.call("t.take", id=1, n=1))
    finally:
        await adapter.aclose()
        shop.engine.dispose()
    error = caught.value
    assert (error.code, error.retryable) == ("database_unavailable", True)
    assert "s3cret" not in error.message and "s3cret" not in str(error.to_json())
    assert error.message.startswith("the database of connection 'shop' is unavailable")


class _Orig(Exception):
    def __init__(self, *args: Any, sqlstate: str | None = None) -> None:
        super().__init__(*args)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("orig", "expected"),
    [
        (_Orig("could not serialize access", sqlstate="40001"), "conflict"),
        (_Orig("deadlock detected", sqlstate="40P01"), "conflict"),
        (_Orig("canceling statement", sqlstate="57014"), "interrupted"),
        (_Orig("cannot execute UPDATE", sqlstate="25006"), "read_only"),
        (_Orig("duplicate key", sqlstate="23505"), "constraint"),
        (_Orig("relation does not exist", sqlstate="42P01"), "sql"),
        (_Orig("terminating connection", sqlstate="57P01"), "unavailable"),
        (_Orig(1213, "Deadlock found"), "conflict"),
        (_Orig(1205, "Lock wait timeout exceeded"), "conflict"),
        (_Orig(4025, "CONSTRAINT failed"), "constraint"),
        (_Orig(2003, "Can't connect"), "unavailable"),
    ],
)
def test_error_categories(orig: Exception, expected: str) -> None:
    assert category(sa.exc.OperationalError("SELECT 1", {}, orig)) == expected


# -- configuration and declarations ----------------------------------------------------------


def test_sql_with_a_template_hole_is_rejected_at_load(tmp_path: Path) -> None:
    bad = (
        TOOLS.format(slow="SELECT 1").split("\n---\n")[1].replace("= :name", "= '{arguments.name}'")
    )
    write_tools(tmp_path / "tools.d", bad)
    with pytest.raises(ConfigError) as caught:
        load_catalogue(tmp_path / "tools.d")
    (problem,) = caught.value.problems
    assert "00.t.find_item.yaml:" in problem and ": sql: " in problem
    assert "{arguments.name}" in problem and ":name parameters" in problem


def test_bind_that_input_does_not_declare_is_rejected_at_load(tmp_path: Path) -> None:
    bad = TOOLS.format(slow="SELECT 1").split("\n---\n")[1].replace("= :name", "= :nam")
    write_tools(tmp_path / "tools.d", bad)
    with pytest.raises(ConfigError) as caught:
        load_catalogue(tmp_path / "tools.d")
    assert "':nam' uses arguments.nam, which input does not declare" in str(caught.value)


@pytest.mark.parametrize(
    ("sql", "fault"),
    [
        ("SELECT 1; DELETE FROM items", "must be one SQL statement"),
        ("SELECT * FROM items WHERE name = {sha256(arguments.name)}", "never a template"),
        ("SELECT * FROM items WHERE name = '{arguments.name}'", "never a template"),
        ("  ", "non-empty"),
    ],
)
def test_bad_sql_is_rejected_at_load(sql: str, fault: str, tmp_path: Path) -> None:
    doc = TOOLS.format(slow="SELECT 1").split("\n---\n")[1]
    doc = doc.replace("sql: SELECT id, name, qty FROM items WHERE name = :name", f"sql: {sql!r}")
    write_tools(tmp_path / "tools.d", doc)
    with pytest.raises(ConfigError) as caught:
        load_catalogue(tmp_path / "tools.d")
    assert ": sql: " in str(caught.value) and fault in str(caught.value)


def test_the_documented_declaration_loads_and_passes_the_start_checks(tmp_path: Path) -> None:
    text = (REPO / "docs/adapters/database.md").read_text(encoding="utf-8")
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.yaml"
    path.write_text(block)
    tool, lines = load_declaration(path)
    options = tool.options
    assert isinstance(options, DatabaseOptions)
    first_cells = re.findall(r"^\| ((?:`[^`]+`(?:, )?)+) \|", text, re.M)
    documented = {key for cell in first_cells for key in re.findall(r"`([^`]+)`", cell)}
    assert set(DatabaseOptions.model_fields) <= documented
    assert set(ConnectionConfig.model_fields) <= documented
    assert set(DatabaseOptions.model_fields) <= set(yaml.safe_load(block))
    assert list(check_tool(tool, lines, {"orders": False})) == []


def test_unknown_connection_and_query_fail_the_start_naming_the_file(tmp_path: Path) -> None:
    docs = TOOLS.format(slow="SELECT 1").split("\n---\n")
    docs[0] = docs[0].replace("connection: shop", "connection: shopp")
    docs[-1] += '\nverify:\n  - {probe: query, query: itme, equals: "1"}'
    text = "\n---\n".join(docs)
    tools_dir = write_tools(tmp_path / "tools.d", text)
    settings = shop_settings(tmp_path, tools_dir, f"sqlite:///{tmp_path / 's.db'}")
    with pytest.raises(ConfigError) as caught:
        database.create(settings, settings.adapters["database"], catalogue_of(settings))
    first, second = caught.value.problems
    assert "00.t.list_items.yaml:6: connection: connection 'shopp' is not declared" in first
    assert "(declared: shop)" in first
    assert "06.t.typo.yaml" in second and "query 'itme' is not declared" in second


@pytest.mark.parametrize(
    ("connection", "fault"),
    [
        ({"url": "postgresql://u:pw@localhost/db"}, "a password is written in the URL"),
        ({"url": "sqlite:///:memory:"}, "in-memory"),
        ({"url": "oracle://u@h/db"}, "unsupported database 'oracle'"),
        ({"url": "postgresql://u@h/db", "password_env": "TG_NOPE"}, "TG_NOPE is not set"),
        ({"url": "postgresql://u@h/db", "seed": "x.py"}, "only for SQLite"),
        ({"url": "sqlite:///a.db", "seed": "missing.py"}, "missing.py does not exist"),
        ({"url": "sqlite:///a.db", "pool_size": 0}, "pool_size"),
    ],
)
def test_bad_connections_are_refused_at_start(
    connection: dict[str, Any], fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TG_NOPE", raising=False)
    settings = shop_settings(tmp_path, tmp_path / "none", **connection)
    with pytest.raises(ConfigError) as caught:
        database.create(settings, settings.adapters["database"], catalogue_of(settings))
    assert fault in str(caught.value)
    assert "pw@" not in str(caught.value)


def test_write_tool_on_a_read_only_connection_is_refused(tmp_path: Path) -> None:
    tools_dir = write_tools(tmp_path / "tools.d", TOOLS.format(slow="SELECT 1"))
    settings = shop_settings(tmp_path, tools_dir, "sqlite:///s.db", read_only=True)
    with pytest.raises(ConfigError) as caught:
        database.create(settings, settings.adapters["database"], catalogue_of(settings))
    assert all("is read-only; a write tool cannot use it" in p for p in caught.value.problems)
    assert len(caught.value.problems) == 4  # take, restock, add, typo


def test_seed_creates_a_missing_database_once(tmp_path: Path) -> None:
    settings = shop_settings(
        tmp_path, tmp_path / "none", "sqlite:///var/o.db", seed=str(REPO / "examples/orders_db.py")
    )
    adapter = database.create(settings, settings.adapters["database"], catalogue_of(settings))
    engine = adapter.connections["shop"].engine
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM orders").scalar() == 40
        conn.exec_driver_sql("DELETE FROM orders WHERE id > 1")
    engine.dispose()
    again = database.create(settings, settings.adapters["database"], catalogue_of(settings))
    with again.connections["shop"].engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM orders").scalar() == 1
    again.connections["shop"].engine.dispose()
    assert sorted(p.name for p in (tmp_path / "var").iterdir() if "seeding" in p.name) == []


RIVAL_SEED = """
import pathlib, sqlite3

def seed(url):
    path = pathlib.Path(url.removeprefix("sqlite:///"))
    mine = sqlite3.connect(path)
    mine.executescript("CREATE TABLE mine (x); INSERT INTO mine VALUES (1);")
    mine.close()
    # Another replica on the shared volume finished seeding first.
    rival = sqlite3.connect(path.parent / "o.db")
    rival.executescript("CREATE TABLE rival (x); INSERT INTO rival VALUES (2);")
    rival.close()
"""


def test_two_replicas_seeding_one_shared_database_keep_one(tmp_path: Path) -> None:
    """Replicas that share the example database's directory (docker-compose.yml) start at
    once, often with the same pid (1, each in its container): the database another one
    published while this one seeded is kept (its connections may already be open on it),
    and another one's file in progress, though named for this pid, is not touched."""
    script = tmp_path / "rival_seed.py"
    script.write_text(RIVAL_SEED)
    same_pid = tmp_path / "var" / f".o.db.{os.getpid()}.seeding"
    same_pid.parent.mkdir()
    same_pid.write_bytes(b"another container's seed in progress")
    engines.run_seed("adapters.database.connections.shop", script, tmp_path / "var" / "o.db")
    with closing(sqlite3.connect(tmp_path / "var" / "o.db")) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"rival"}
    assert same_pid.read_bytes() == b"another container's seed in progress"
    left = sorted(p.name for p in (tmp_path / "var").iterdir())
    assert left == [same_pid.name, "o.db"]


def test_failing_seed_leaves_no_database(tmp_path: Path) -> None:
    script = tmp_path / "bad_seed.py"
    script.write_text("def seed(url):\n    raise RuntimeError('boom')\n")
    settings = shop_settings(tmp_path, tmp_path / "none", "sqlite:///o.db", seed=str(script))
    with pytest.raises(ConfigError, match=r"bad_seed\.py failed: RuntimeError: boom"):
        database.create(settings, settings.adapters["database"], catalogue_of(settings))
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert left == ["bad_seed.py"]


# -- through the whole gateway API -----------------------------------------------------------

ALICE = {"Authorization": "Bearer tg_dev_alice"}


@pytest.fixture
def api(project: Path, tmp_path: Path) -> Iterator[TestClient]:
    if not (project / "examples").exists():
        shutil.copytree(REPO / "examples", project / "examples")
    settings = load_settings(
        project / "toolgate.yaml", env={}, database_url=f"sqlite:///{tmp_path / 'gw.db'}"
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def _orders_db(project: Path) -> sa.Engine:
    return sa.create_engine(f"sqlite:///{project / 'var/examples/orders.db'}")


def _call(client: TestClient, tool: str, arguments: dict[str, Any], **extra: Any) -> Any:
    payload = {
        "run_id": "run-db",
        "turn_id": "t1",
        "call_id": f"c-{uuid.uuid4().hex[:8]}",
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "coder"},
        "workspace": {"id": "demo"},
        **extra,
    }
    response = client.post("/v1/executions", json=payload, headers=ALICE)
    assert response.status_code == 200, response.text
    return response.json()["result"]


def _paid_order(client: TestClient) -> dict[str, Any]:
    result = _call(client, "db.query_orders", {"status": "paid", "limit": 1})
    assert result["outcome"] == "succeeded", result
    row: dict[str, Any] = result["data"]["rows"][0]
    return row


def test_api_query_orders_on_the_example_database(api: TestClient) -> None:
    result = _call(api, "db.query_orders", {"status": "paid", "limit": 3})
    assert result["outcome"] == "succeeded", result
    assert [r["status"] for r in result["data"]["rows"]] == ["paid"] * 3
    assert result["data"]["truncated"] is False
    assert result["evidence"][0]["kind"] == "query_result"
    everything = _call(api, "db.query_orders", {"limit": 200})
    assert everything["data"]["row_count"] == 40
    invalid = _call(api, "db.query_orders", {"status": "lost"})
    assert invalid["error"]["phase"] == "validate"


def test_api_mark_shipped_commits_and_verifies(api: TestClient, project: Path) -> None:
    order = _paid_order(api)
    args = {"order_id": order["id"], "carrier": "dhl", "tracking": "TRK-NEW-1"}
    result = _call(
        api,
        "db.mark_shipped",
        args,
        idempotency_key=f"ship-{order['id']}",
        expected_state={"row_version": order["version"]},
    )
    assert result["outcome"] == "succeeded", result
    assert result["data"]["rows_affected"] == 1
    assert result["data"]["rows"][0]["status"] == "shipped"
    probes = [e for e in result["evidence"] if e["kind"] == "probe"]
    assert [p["passed"] for p in probes] == [True, True]
    engine = _orders_db(project)
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT status, tracking, shipped_by, version FROM orders WHERE id = :id"),
            {"id": order["id"]},
        ).one()
    engine.dispose()
    assert tuple(row) == ("shipped", "TRK-NEW-1", "alice", order["version"] + 1)
    again = _call(api, "db.mark_shipped", {**args, "tracking": "TRK-NEW-2"}, idempotency_key="x")
    assert again["outcome"] == "failed"
    assert again["error"]["type"] == "unexpected_row_count"


def test_api_stale_row_version_fails_at_validate_and_changes_nothing(
    api: TestClient, project: Path
) -> None:
    order = _paid_order(api)
    result = _call(
        api,
        "db.mark_shipped",
        {"order_id": order["id"], "carrier": "ups", "tracking": "TRK-STALE"},
        idempotency_key="stale",
        expected_state={"row_version": order["version"] - 1},
    )
    assert result["outcome"] == "failed"
    assert (result["error"]["phase"], result["error"]["type"]) == ("validate", "state_mismatch")
    assert result["side_effect"]["attempted"] is False
    assert _paid_order(api) == order


def test_api_verify_probe_that_does_not_hold_fails_the_call(project: Path, tmp_path: Path) -> None:
    decl = project / "tools.d" / "db.mark_shipped.yaml"
    decl.write_text(decl.read_text().replace("equals: shipped}", "equals: delivered}", 1))
    if not (project / "examples").exists():
        shutil.copytree(REPO / "examples", project / "examples")
    settings = load_settings(
        project / "toolgate.yaml", env={}, database_url=f"sqlite:///{tmp_path / 'gw.db'}"
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        order = _paid_order(client)
        args = {"order_id": order["id"], "carrier": "fedex", "tracking": "TRK-VERIFY"}
        result = _call(client, "db.mark_shipped", args, idempotency_key="verify")
    assert result["outcome"] == "failed"
    assert (result["error"]["phase"], result["error"]["type"]) == ("verify", "verification_failed")
    probes = [e for e in result["evidence"] if e["kind"] == "probe"]
    assert probes[0]["observed"] == "shipped" and probes[0]["passed"] is False


@pytest.mark.parametrize("committed", [True, False])
def test_api_timeout_is_reconciled_with_the_database(
    committed: bool, api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    order = _paid_order(api)
    real = DatabaseAdapter.execute

    async def stalls(self: DatabaseAdapter, call: AdapterCall) -> Any:
        # The gateway gives up at the deadline: before or after the database committed.
        if committed:
            outcome = await real(self, call)
            await anyio.sleep(30)
            return outcome
        await anyio.sleep(30)
        return await real(self, call)

    monkeypatch.setattr(DatabaseAdapter, "execute", stalls)
    args = {"order_id": order["id"], "carrier": "dhl", "tracking": "TRK-LATE"}
    deadline = int((time.time() + 1.5) * 1000)
    result = _call(api, "db.mark_shipped", args, idempotency_key="late", deadline=deadline)
    monkeypatch.undo()
    reconciled = [e for e in result["evidence"] if e.get("purpose") == "reconcile"]
    assert len(reconciled) == 2
    if committed:
        assert result["outcome"] == "succeeded", result
        assert result["side_effect"]["summary"] == "reconciled: the side effect is in place"
    else:
        assert result["outcome"] == "failed", result
        assert result["side_effect"]["committed"] is False
        assert _paid_order(api) == order


# -- values the database cannot hold ----------------------------------------------------------


@pytest.mark.parametrize("value", [10**30, -(10**30), 2**63, -(2**63) - 1])
async def test_an_integer_the_database_cannot_hold_is_a_clear_error(shop: Shop, value: int) -> None:
    before = shop.state()
    for tool, arguments in (
        ("t.take", {"id": value, "n": 1}),
        ("t.list_items", {"min_qty": value}),
    ):
        with pytest.raises(CallError) as caught:
            await shop.adapter.execute(shop.call(tool, **arguments))
        assert caught.value.code in ("invalid_arguments", "sql_error"), caught.value.message
        assert str(value) not in caught.value.message or caught.value.code == "invalid_arguments"
    take = shop.call("t.take", id=value, n=1)
    for probe, params in (("row_version", {}), ("query", {"query": "qty"})):
        with pytest.raises(CallError) as caught:
            await shop.adapter.probe(probe, params, take)
        assert caught.value.code in ("invalid_arguments", "sql_error"), caught.value.message
    assert shop.state() == before


async def test_a_string_the_driver_cannot_bind_is_a_clear_error(shop: Shop) -> None:
    """Past the range check, whatever the driver cannot bind is mapped at the edge."""
    before = shop.state()
    for tool, arguments in (
        ("t.find_item", {"name": "lone \ud800 surrogate"}),
        ("t.add", {"id": 99, "name": "lone \ud800 surrogate"}),
    ):
        with pytest.raises(CallError) as caught:
            await shop.adapter.execute(shop.call(tool, **arguments))
        assert caught.value.code in ("invalid_arguments", "sql_error"), caught.value.message
        assert "\ud800" not in caught.value.message
    assert shop.state() == before


def test_api_an_integer_wider_than_64_bits_ends_the_call_and_its_replays(
    api: TestClient,
) -> None:
    """Issue 21 §1: was a 500 and an execution left running, replays 409 in flight."""
    args = {"order_id": 10**30, "carrier": "dhl", "tracking": "TRK-WIDE-1"}
    payload = {
        "run_id": "run-wide",
        "turn_id": "t1",
        "call_id": "c-wide",
        "tool": {"name": "db.mark_shipped"},
        "arguments": args,
        "workspace": {"id": "demo"},
        "idempotency_key": "wide-1",
    }
    first = api.post("/v1/executions", json=payload, headers=ALICE)
    assert first.status_code == 200, first.text
    execution = first.json()
    result = execution["result"]
    assert execution["status"] == "completed" and result["outcome"] == "failed", result
    assert result["error"]["type"] == "invalid_arguments"
    assert result["side_effect"]["attempted"] is False
    replay = api.post("/v1/executions", json=payload, headers=ALICE)
    assert replay.status_code == 200, replay.text
    assert replay.json()["id"] == execution["id"]
    read = _call(api, "db.query_orders", {"status": "paid", "limit": 1, "after_id": 10**30})
    assert read["outcome"] == "failed" and read["error"]["type"] in (
        "invalid_arguments",
        "sql_error",
    ), read


# -- a read tool's SQL is classified at load -------------------------------------------------

READ_TOOL = """\
name: t.{name}
version: 1.0.0
description: a read tool
adapter: database
operation: query
connection: shop
risk: low
side_effect: read
input: {{id: {{type: integer}}}}
sql: "{sql}"
"""


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("UPDATE items SET qty = 0 WHERE id = :id", "writes (it holds UPDATE)"),
        (
            "WITH gone AS (DELETE FROM items WHERE id = :id RETURNING id) SELECT * FROM gone",
            "writes (it holds DELETE)",
        ),
        ("SELECT nextval('items_seq') AS n, :id AS id", "writes (it calls nextval()"),
        ("SELECT lo_unlink(:id)", "writes (it calls lo_unlink()"),
        ("SELECT qty FROM items WHERE id = :id FOR UPDATE", "writes (it holds UPDATE)"),
        ("SELECT qty INTO TEMP copy FROM items WHERE id = :id", "writes (it holds INTO)"),
        ("PRAGMA user_version = 3", "cannot be classified as a read"),
    ],
)
def test_a_read_tool_whose_sql_writes_fails_the_check(
    tmp_path: Path, shop_url: str, sql: str, why: str
) -> None:
    """Issue 21 §3: only the read-only transaction refused these, at run time (the check
    reads the statement, not the engine: the same on SQLite, PostgreSQL and MariaDB)."""
    tools_dir = tmp_path / "tools.d"
    tools_dir.mkdir()
    (tools_dir / "bad.yaml").write_text(READ_TOOL.format(name="bad", sql=sql))
    settings = shop_settings(tmp_path, tools_dir, shop_url)
    with pytest.raises(ConfigError) as caught:
        database.create(settings, settings.adapters["database"], catalogue_of(settings))
    [problem] = caught.value.problems
    assert "bad.yaml:10: sql" in problem and "sql" in problem, problem
    assert why in problem, problem


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, name FROM items WHERE id = :id",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < :id) "
        "SELECT count(*) AS n FROM c",
        "SELECT replace(name, 'DELETE', 'x') AS n FROM items WHERE id = :id -- UPDATE",
        "(SELECT 1 AS one WHERE 1 = :id)",
    ],
)
def test_a_read_tool_whose_sql_reads_passes_the_check(tmp_path: Path, sql: str) -> None:
    tools_dir = tmp_path / "tools.d"
    tools_dir.mkdir()
    (tools_dir / "ok.yaml").write_text(READ_TOOL.format(name="ok", sql=sql))
    settings = shop_settings(tmp_path, tools_dir, f"sqlite:///{tmp_path / 'shop.db'}")
    adapter = database.create(settings, settings.adapters["database"], catalogue_of(settings))
    adapter.connections["shop"].engine.dispose()


def test_a_probe_query_that_writes_fails_the_check(tmp_path: Path) -> None:
    tools_dir = write_tools(tmp_path / "tools.d", TOOLS.format(slow="SELECT 1"))
    take = next(tools_dir.glob("*t.take.yaml"))
    take.write_text(
        take.read_text().replace(
            "qty: SELECT qty FROM items WHERE id = :id",
            "qty: SELECT setval('s', :id) AS qty",
        )
    )
    settings = shop_settings(tmp_path, tools_dir, f"sqlite:///{tmp_path / 'shop.db'}")
    with pytest.raises(ConfigError) as caught:
        database.create(settings, settings.adapters["database"], catalogue_of(settings))
    [problem] = caught.value.problems
    assert take.name in problem and "queries.qty" in problem and "setval()" in problem, problem


@pytest.mark.slow  # starts a process itself
def test_toolgate_check_reports_a_read_tool_that_writes(project: Path) -> None:
    """The same fault through the CLI, like every other declaration fault."""
    import subprocess
    import sys

    (project / "tools.d" / "db.sneaky.yaml").write_text(
        READ_TOOL.format(
            name="sneaky", sql="UPDATE orders SET status = 'x' WHERE id = :id"
        ).replace("connection: shop", "connection: orders")
    )
    if not (project / "examples").exists():
        shutil.copytree(REPO / "examples", project / "examples")
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--config", str(project / "toolgate.yaml"), "check"],
        capture_output=True,
        text=True,
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert done.returncode != 0, done.stdout
    out = done.stdout + done.stderr
    assert "db.sneaky.yaml:10: sql" in out and "writes (it holds UPDATE)" in out, out
