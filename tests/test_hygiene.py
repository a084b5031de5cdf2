"""Habits of the test suite that a slip would quietly break, checked on the source.

Each check is a function over a syntax tree, and each has a test showing it finds what it
looks for, so that a scan that found nothing is not mistaken for a clean tree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import REPO

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
    )
    assert [n.lineno for n in conftest_imports(tree)] == [1, 2, 3]
    assert [n.lineno for n in conditional_asserts(tree)] == [9]
    assert [n.name for n in fixtures_named(tree, "anyio_backend")] == ["anyio_backend"]
