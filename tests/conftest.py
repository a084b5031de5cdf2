"""Shared fixtures: a project laid out in a temp dir, the SQLite/PostgreSQL stores, and the
anyio backend. Constants and helpers are in tests/helpers.py.

PostgreSQL tests use the server on 127.0.0.1:5432; each test gets a database of its own,
empty (emptied after the test before it, not dropped: ``Databases`` in tests/helpers.py).
Off CI a missing server skips them with the reason; in CI (CI=true) a missing server fails
them.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("RUST_LIB_BACKTRACE", "0")

from gateway.settings import Settings, load_settings
from tests.helpers import (
    IN_CI,
    PG_HOST,
    PG_USER,
    REPO,
    WATCH,
    Databases,
    pg_admin,
    process_fixtures,
    unmarked_process,
)

# --- the tiers: `make test-fast` is `-m "not slow"`, and starts no process --------------------


def pytest_configure(config: pytest.Config) -> None:
    sys.addaudithook(WATCH)  # an audit hook stays for the interpreter's life: one, here


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """Fails the run when collecting the tests (importing them) started a process. What
    started one before is the runner's own: a pytest-xdist worker runs ``uname -p``
    (``platform.platform()``) as it reports ready, before it collects."""
    WATCH.take()
    collected = yield
    if started := WATCH.take():
        raise pytest.UsageError(f"collecting the tests started processes: {started[:3]}")
    return collected


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects on the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks ``slow`` every test that uses a fixture tagged @starts_processes."""
    for item in items:
        if isinstance(item, pytest.Function) and process_fixtures(item):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Fails, at its teardown, a test not marked ``slow`` that started a process (its own
    fixtures' setup and teardown included), so a slip cannot slow the fast tier quietly."""
    report = yield
    if call.when == "teardown":
        why = unmarked_process(item.get_closest_marker("slow") is not None, WATCH.take())
        if why and report.passed:
            report.outcome = "failed"
            report.longrepr = why
    return report


def _own_handlers() -> list[logging.Handler]:
    """The root logger's handlers but pytest's own (it adds one per test phase)."""
    return [h for h in logging.getLogger().handlers if type(h).__module__ != "_pytest.logging"]


@pytest.fixture(autouse=True)
def _root_logger_left_alone() -> Iterator[None]:
    """A test that sets up logging (``toolgate serve`` in-process does) puts the root
    logger back: a handler left on a test's captured stderr made later tests' log lines
    fail with "I/O operation on closed file"."""
    before = _own_handlers()
    yield
    after = _own_handlers()
    assert after == before, f"the test left the root logger's handlers at {after}"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Async tests (``pytest.mark.anyio``) run on asyncio; module scope lets a module's
    async fixtures be module-scoped."""
    return "asyncio"


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The PostgreSQL server, or a skip (a failure in CI) saying why it is missing."""
    try:
        with pg_admin() as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        reason = f"PostgreSQL on {PG_HOST}:5432 does not answer ({exc})"
        if IN_CI:
            pytest.fail(f"{reason}; CI requires it", pytrace=False)
        pytest.skip(reason)
    return f"postgresql+psycopg://{PG_USER}@{PG_HOST}:5432"


@pytest.fixture(scope="session")
def pg_databases(pg_server: str) -> Iterator[Databases]:
    """This session's databases (tests/helpers.py, ``Databases``), dropped at its end."""
    databases = Databases()
    yield databases
    databases.drop_all()


def _fresh_database(pg_server: str, databases: Databases) -> Iterator[str]:
    name = databases.take()
    try:
        yield f"{pg_server}/{name}"
    finally:
        databases.give_back(name)


@pytest.fixture
def pg_url(pg_server: str, pg_databases: Databases) -> Iterator[str]:
    """An empty database for one test."""
    yield from _fresh_database(pg_server, pg_databases)


@pytest.fixture(scope="module")
def pg_module_url(pg_server: str, pg_databases: Databases) -> Iterator[str]:
    """An empty database shared by the tests of one module (e.g. by the gateway processes
    they start once)."""
    yield from _fresh_database(pg_server, pg_databases)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the shipped configuration, tools, policy and data in a temp dir."""
    for name in ("tools.d", "rego", "policies", "examples"):
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__")
            )
    shutil.copy(REPO / "toolgate.yaml", tmp_path / "toolgate.yaml")
    return tmp_path


@pytest.fixture
def settings(project: Path, database_url: str) -> Settings:
    return load_settings(project / "toolgate.yaml", env={}, database_url=database_url)


@pytest.fixture
def workspace_root(project: Path) -> Path:
    root = project / "var" / "workspaces" / "demo"
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()
