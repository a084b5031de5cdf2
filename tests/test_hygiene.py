"""Habits of the test suite that a slip would quietly break, checked on the source.

Each check is a function over a syntax tree, and each has a test showing it finds what it
looks for, so that a scan that found nothing is not mistaken for a clean tree.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    REPO,
    WATCH,
    Databases,
    ProcessWatch,
    pg_admin,
    process_fixtures,
    starts_processes,
    unmarked_process,
)

TESTS = REPO / "tests"


def modules(root: Path = TESTS) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def where(path: Path, node: ast.stmt) -> str:
    return f"{path.relative_to(REPO)}:{node.lineno}"


def conditional_asserts(tree: ast.Module) -> list[ast.Assert]:
    """``assert a == b if cond else c`` is ``assert (a == b) if cond else c``: when ``cond``
    is false it asserts ``c``, which is usually truthy, so that case can never fail."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.IfExp)
    ]


def conftest_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports of a conftest module. pytest loads conftest.py itself; a test that imports
    one by name can get a second copy of it, and what it shares belongs in a helper module
    (tests/helpers.py, tests/server/helpers.py)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if any(name.split(".")[-1] == "conftest" for name in names):
            found.append(node)
    return found


def imports_of_tests(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports of the ``tests`` package (function-local ones too). ``bench/`` measures the
    gateway with the public kit ``gateway.testing``; test code is free to change under it."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if any(name == "tests" or name.startswith("tests.") for name in names):
            found.append(node)
    return found


def fixtures_named(tree: ast.Module, name: str) -> list[ast.FunctionDef]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and node.name == name
        and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    ]


def test_no_assert_of_a_conditional_expression() -> None:
    found = [where(p, n) for p, tree in modules() for n in conditional_asserts(tree)]
    assert not found, (
        f"assert <x> if <cond> else <y> asserts <y> when <cond> is false: {found}; "
        "put the conditional in parentheses on one side of the comparison"
    )


def test_no_test_module_imports_a_conftest() -> None:
    found = [where(p, n) for p, tree in modules() for n in conftest_imports(tree)]
    assert not found, (
        f"these import from a conftest: {found}; move what they import into "
        "tests/helpers.py (or tests/<package>/helpers.py) and keep only fixtures in conftest.py"
    )


def test_no_bench_module_imports_from_tests() -> None:
    found = [where(p, n) for p, tree in modules(REPO / "bench") for n in imports_of_tests(tree)]
    assert not found, (
        f"these bench modules import test code: {found}; move what they need into "
        "gateway/testing.py (documented in docs/adapters/writing.md#testing) or into bench/"
    )


def test_the_anyio_backend_fixture_is_defined_once() -> None:
    found = [where(p, n) for p, tree in modules() for n in fixtures_named(tree, "anyio_backend")]
    assert [f.split(":")[0] for f in found] == ["tests/conftest.py"], (
        f"anyio_backend is defined in {found}: keep the one in tests/conftest.py"
    )


def test_the_scans_find_what_they_look_for() -> None:
    tree = ast.parse(
        "import tests.conftest\n"
        "from tests.server.conftest import auth\n"
        "from tests.server import conftest\n"
        "from tests.helpers import REPO\n"
        "import pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def anyio_backend(): return 'asyncio'\n"
        "def test_x(a, b, c):\n"
        "    assert a == b if c else a\n"
        "    assert a == (b if c else a)\n"
        "    import tests.adapters.test_http, testsuite\n"
        "    from tests import helpers\n"
        "    from .tests import x\n"
    )
    assert [n.lineno for n in conftest_imports(tree)] == [1, 2, 3]
    assert [n.lineno for n in imports_of_tests(tree)] == [1, 2, 3, 4, 11, 12]
    assert [n.lineno for n in conditional_asserts(tree)] == [9]
    assert [n.name for n in fixtures_named(tree, "anyio_backend")] == ["anyio_backend"]


# --- the house (docs/architecture.md) ----------------------------------------------------------

GATEWAY = REPO / "gateway"


def room_of(module: str) -> str:
    """``gateway.pipeline.runner`` → ``pipeline``; ``gateway.errors`` → ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def room_graph(root: Path = GATEWAY) -> dict[str, set[str]]:
    """Which room imports which, from every import in gateway/ (function-local ones too)."""
    edges: dict[str, set[str]] = {}
    for path, tree in modules(root):
        relative = path.relative_to(root.parent).with_suffix("")
        here = room_of(".".join(relative.parts))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                if node.module == "gateway":
                    names = [f"gateway.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.startswith("gateway.") and room_of(name) != here:
                    edges.setdefault(here, set()).add(room_of(name))
    return edges


def cycles(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    return sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in reach(b)})  # type: ignore[misc]


def test_no_import_cycle_between_the_rooms_of_gateway() -> None:
    found = cycles(room_graph())
    assert not found, f"rooms of gateway/ that import each other: {found} (docs/architecture.md)"


def test_the_client_kit_imports_nothing_of_the_other_rooms() -> None:
    # the kit is a client over HTTP only (docs/architecture.md): what the gateway shares with
    # it (the idempotency key of a named call, client/keys.py) lives in it
    found = room_graph().get("client", set())
    assert not found, f"gateway/client/ imports the rooms {sorted(found)}"


def test_every_room_of_gateway_is_on_the_map() -> None:
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rooms = {p.name for p in GATEWAY.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    rooms |= {p.stem for p in GATEWAY.glob("*.py") if p.stem != "__init__"}
    missing = sorted(r for r in rooms if f"{r}/" not in page and f"{r}.py" not in page)
    assert not missing, f"docs/architecture.md does not name the rooms {missing}"


def stage_loops(tree: ast.Module) -> list[ast.For | ast.AsyncFor]:
    """Loops over a list of stages. One loop drives them (``pipeline/runner.drive``, with
    observers around it): a second copy is one the tests may not run."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.For | ast.AsyncFor)
        and ast.unparse(node.iter).lower().endswith("stages")
    ]


def test_one_loop_drives_the_stages() -> None:
    found = [where(p, n) for p, tree in modules(GATEWAY) for n in stage_loops(tree)]
    assert [f.split(":")[0] for f in found] == ["gateway/pipeline/runner.py"], (
        f"loops over the stages at {found}: give runner.drive a step or an observer instead"
    )


def test_the_room_checks_can_fail() -> None:
    tree = ast.parse("for s in STAGES: pass\nfor s in self.plan_stages: pass\nfor s in x: pass\n")
    assert [n.lineno for n in stage_loops(tree)] == [1, 2]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [("a", "b")]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []
    assert (
        room_of("gateway.pipeline.runner") == "pipeline" and room_of("gateway.errors") == "errors"
    )


# --- the doors stand on the service layer (docs/architecture.md) -----------------------------

DOORS = ("server", "mcp", "ui")
COMPOSITION_ROOT = "gateway/server/app.py"
"""Where the app is put together: it starts the runtime, its recovery, workers and reload."""
RECORDS_BELOW = frozenset(
    {
        "gateway.pipeline.records",
        "gateway.pipeline.request",
        "gateway.store.records",
        "gateway.runtime.container",
        "gateway.runtime.admission",
    }
)
"""What a door may import from beneath the service layer: the records and the request it
translates its wire to and from, the runtime's type, and the admission gauges' type."""


def reaches_past_the_service(tree: ast.Module) -> list[ast.AST]:
    """A door's imports of the pipeline, the runtime or the store other than their records,
    and its uses of the store (``<...>.store.<operation>``): what every door does is written
    once, in ``gateway/service/``, and the doors only translate their wire."""
    found: list[ast.AST] = []
    below = ("gateway.pipeline", "gateway.runtime", "gateway.store")
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module in ("gateway.pipeline", "gateway.runtime", "gateway.store"):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        if any(n.startswith(below) and n not in RECORDS_BELOW for n in names):
            found.append(node)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "store"
        ):
            found.append(node)
    return found


def test_the_doors_reach_the_pipeline_and_the_store_only_through_the_service_layer() -> None:
    found = [
        f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
        for room in DOORS
        for path, tree in modules(GATEWAY / room)
        if str(path.relative_to(REPO)) != COMPOSITION_ROOT
        for node in reaches_past_the_service(tree)
    ]
    assert not found, (
        f"these door modules reach past gateway/service/: {found}; add (or use) the operation "
        "in gateway/service/ and call it from the door"
    )


def test_the_service_scan_finds_what_it_looks_for() -> None:
    tree = ast.parse(
        "from gateway.pipeline.runner import run_call\n"
        "from gateway.pipeline import plan\n"
        "import gateway.store.store\n"
        "from gateway.store.records import ExecutionRecord\n"
        "from gateway.service import calls\n"
        "async def f(services):\n"
        "    return await services.store.get_execution('x')\n"
        "def g(services):\n"
        "    return services.store\n"
    )
    assert [getattr(n, "lineno", 0) for n in reaches_past_the_service(tree)] == [1, 2, 3, 7]


# --- one definition per constant and per wire format (issue 30) --------------------------------


def definitions(root: Path = GATEWAY) -> dict[str, list[str]]:
    """Where each module-level class and constant of gateway/ is defined (``module:line``)."""
    found: dict[str, list[str]] = {}
    for path, tree in modules(root):
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            for name in names:
                found.setdefault(name, []).append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


ONE_HOME = (
    "NOTHING_ATTEMPTED",  # gateway/adapters/base.py
    "EgressDecl",  # gateway/adapters/shared/egress.py
    "DecisionCache",  # gateway/policy/cache.py
    "Heads",  # gateway/http/heads.py
    "_LRU",
    "_TimedLRU",
    "_Heads",
    "_Frozen",  # gateway/settings.py; declaration parts build on declarations.model.Frozen
)
"""Names that had a copy, each with its own value or behaviour, and now have one home."""


def test_each_shared_name_is_defined_once() -> None:
    found = definitions()
    twice = {name: found[name] for name in ONE_HOME if len(found.get(name, ())) > 1}
    assert not twice, f"defined more than once in gateway/: {twice}"
    assert all(len(found.get(name, ())) == 1 for name in ONE_HOME[:4])


def test_the_definition_scan_can_fail(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("X = 1\nclass C: ...\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("X: int = 2\ndef f():\n    C = 3\n", encoding="utf-8")
    found = definitions(tmp_path)
    assert [len(found["X"]), len(found["C"])] == [2, 1]


def responses_skipping_init(tree: ast.Module) -> list[ast.ClassDef]:
    """A ``Response`` subclass whose ``__init__`` does not call ``super().__init__``: it
    builds Starlette's response from its internals, which a Starlette release may change."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        if not any(ast.unparse(b).endswith("Response") for b in node.bases):
            continue
        for item in node.body:
            if (
                isinstance(item, ast.FunctionDef)
                and item.name == "__init__"
                and "super().__init__" not in ast.unparse(item)
            ):
                found.append(node)
    return found


def test_no_response_skips_starlettes_init() -> None:
    found = [where(p, n) for p, tree in modules(GATEWAY) for n in responses_skipping_init(tree)]
    assert not found, f"build a Response with its public constructor: {found}"
    tree = ast.parse(
        "class A(Response):\n    def __init__(self):\n        self.body = b''\n"
        "class B(JSONResponse):\n    def __init__(self):\n        super().__init__(b'')\n"
    )
    assert [n.name for n in responses_skipping_init(tree)] == ["A"]


def private_uses(tree: ast.Module, module: str) -> list[ast.Attribute]:
    """``module._name``: a private name of a library the gateway does not own."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and ast.unparse(node.value) == module
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]


def test_no_private_name_of_dataclasses_is_used() -> None:
    found = [where(p, n) for p, tree in modules(GATEWAY) for n in private_uses(tree, "dataclasses")]
    assert not found, f"dataclasses' internals: {found}"
    tree = ast.parse("dataclasses._FIELD\ndataclasses.fields\ndataclasses.__name__")
    assert [n.lineno for n in private_uses(tree, "dataclasses")] == [1]


# --- the tiers (`make test-fast` starts no process; tests/conftest.py) -------------------------


@pytest.fixture
@starts_processes
def spawned() -> str:
    done = subprocess.run([sys.executable, "-c", "print('spawned')"], capture_output=True)
    return done.stdout.decode().strip()


@pytest.fixture
def through_spawned(spawned: str) -> str:
    return spawned


def test_a_fixture_that_starts_a_process_marks_its_tests_slow_and_the_watch_sees_it(
    request: pytest.FixtureRequest, through_spawned: str
) -> None:
    assert through_spawned == "spawned"
    assert process_fixtures(request.node) == ["spawned"]  # found through another fixture
    assert request.node.get_closest_marker("slow") is not None
    assert any(sys.executable in seen for seen in WATCH.started), WATCH.started


def test_a_test_that_starts_no_process_is_fast_and_would_be_failed_if_it_did(
    request: pytest.FixtureRequest,
) -> None:
    assert process_fixtures(request.node) == []
    assert request.node.get_closest_marker("slow") is None
    sys.audit("os.posix_spawn", b"/bin/true", [b"true", b"-x"], {"TOKEN": "secret"})
    sys.audit("os.fork")
    seen = WATCH.take()  # the events were raised, no process started: this test stays clean
    assert seen == ["os.posix_spawn true -x", "os.fork "]
    why = unmarked_process(False, seen)
    assert why is not None and "os.posix_spawn true -x" in why and "secret" not in why
    assert unmarked_process(True, seen) is None and unmarked_process(False, []) is None


def test_the_process_watch_tells_process_events_from_others() -> None:
    watch = ProcessWatch()
    watch("subprocess.Popen", ("/usr/bin/git", ["git", "status"], "/tmp", {"KEY": "k"}))
    watch("os.system", (b"echo hi",))
    watch("open", ("/etc/passwd", "r", 0))
    watch("socket.connect", (None, ("127.0.0.1", 80)))
    assert watch.take() == ["subprocess.Popen git status", "os.system echo hi"]
    assert watch.take() == []
    # A tool's command, run by the process adapter, is the work under test; the gateway
    # process the kit starts is not.
    event = "watch('subprocess.Popen', ('python', ['python', 'tool.py'], None, None))"
    exec(event, {"__name__": "gateway.adapters.process.adapter", "watch": watch})
    exec(event, {"__name__": "gateway.adapters.processes", "watch": watch})
    exec(event, {"__name__": "gateway.testing", "watch": watch})
    assert watch.take() == ["subprocess.Popen python tool.py"] * 2


TIER_TESTS = """\
import subprocess
import sys

import pytest


def test_unmarked() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.slow
def test_marked() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@pytest.mark.slow  # runs pytest as a process, and its tests start more
@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "2"]], ids=["one", "xdist"])
def test_the_tier_check_holds_in_one_process_and_in_xdist_workers(
    tmp_path: Path, workers: list[str]
) -> None:
    """The suite's hooks (tests/conftest.py, loaded as a plugin) fail the unmarked test that
    starts a process and pass the marked one. Under xdist the watch once saw the worker's own
    ``uname -p`` before collection, called it the tests' and crashed the worker."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  slow: s\n  postgres: p\n")
    (tmp_path / "test_tier.py").write_text(TIER_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-W", "error", "-p", "tests.conftest", *workers],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert "ERROR test_tier.py::test_unmarked - this test is not marked slow" in out and (
        "2 passed, 1 error" in out  # the check fails the unmarked test at its teardown
    ), out


# --- the tests' PostgreSQL databases (tests/conftest.py, pg_url) ----------------------------


@pytest.mark.postgres
def test_a_database_given_back_is_handed_out_again_as_a_new_one_is(pg_server: str) -> None:
    databases = Databases()
    name = databases.take()
    left_open = None
    schema = "SELECT nspowner::regrole::text, nspacl::text[] FROM pg_namespace WHERE nspname = %s"
    tables = "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace"
    try:
        with pg_admin(name) as conn:
            new = conn.execute(schema, ("public",)).fetchone()
        left_open = pg_admin(name)  # a test's connection, left in a transaction holding a lock
        left_open.execute("CREATE TABLE t (id serial PRIMARY KEY, v text); CREATE INDEX ON t (v)")
        left_open.execute("BEGIN")
        left_open.execute("SELECT * FROM t")
        databases.give_back(name)  # ends it, or it would wait for that lock
        assert databases.take() == name
        with pg_admin(name) as conn:
            again = (conn.execute(schema, ("public",)).fetchone(), conn.execute(tables).fetchone())
        assert again == (new, (0,))
    finally:
        if left_open is not None:
            left_open.close()
        databases.drop_all()
