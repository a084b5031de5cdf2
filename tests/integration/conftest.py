"""Fixtures of the integration tests: gateway processes started once per module."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from gateway.store.store import Store
from tests.helpers import starts_processes
from tests.integration.helpers import Cluster, replica_project, start_replicas

OTHER_NODE = {"TOOLGATE_NODE_ID": "another-node"}
"""The environment of a replica that passes for another machine: its pids are not ours."""
SHOWN_LINES = 300
"""Lines of each replica's log a failed test shows: the last ones it logged during the test."""
LOG_STARTS = pytest.StashKey[dict[str, tuple[Path, int]]]()
"""Each replica's log, by replica name, and its size when the test began."""


@pytest.fixture(scope="module")
@starts_processes
def cluster(tmp_path_factory: pytest.TempPathFactory, pg_module_url: str) -> Iterator[Cluster]:
    """Four ``toolgate serve`` processes on one fresh PostgreSQL database: ``a`` and ``b``
    survive; ``same`` (this node) and ``other`` (another node) are there to be killed."""
    config, workspace = replica_project(tmp_path_factory.mktemp("replicas"), pg_module_url)
    store = Store(pg_module_url)
    store.open_sync()  # the schema, before four processes race to create it
    store.engine.dispose()
    with ExitStack() as stack:
        envs = {"a": {}, "b": {}, "same": {}, "other": OTHER_NODE}
        yield Cluster(pg_module_url, workspace, start_replicas(config, envs, stack))


@pytest.fixture(autouse=True)
def replica_logs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's part of the replicas' logs, kept apart in ``logs/<test>/gateway-<name>.log``
    (the replicas live for the module, so their own logs mix every test's lines), and shown
    in the report of a test that failed (``pytest_runtest_makereport``)."""
    if "cluster" not in request.fixturenames:
        yield
        return
    cluster: Cluster = request.getfixturevalue("cluster")
    starts = {name: (r.log, _size(r.log)) for name, r in cluster.replicas.items()}
    request.node.stash[LOG_STARTS] = starts
    yield
    folder = logs_folder(cluster, request.node)
    for name, (path, start) in starts.items():
        (folder / f"gateway-{name}.log").write_text(_tail(path, start))


def logs_folder(cluster: Cluster, node: pytest.Item) -> Path:
    """``logs/<test>/`` beside the replicas' logs: what is kept of one test (its part of
    each replica's log; the evidence of a doubled side effect, ``test_replicas.py``)."""
    root = next(iter(cluster.replicas.values())).log.parent
    folder = root / "logs" / re.sub(r"[^\w.-]+", "_", node.name)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def evidence_dir(cluster: Cluster, request: pytest.FixtureRequest) -> Path:
    """This test's ``logs/<test>/`` folder (``logs_folder``)."""
    return logs_folder(cluster, request.node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test on the cluster that failed shows what each replica logged during it."""
    report = yield
    if report.failed and call.when == "call":
        for name, (path, start) in item.stash.get(LOG_STARTS, {}).items():
            shown = "\n".join(_tail(path, start).splitlines()[-SHOWN_LINES:])
            report.sections.append((f"replica {name}: its log during this test", shown))
    return report


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path, start: int) -> str:
    """What ``path`` got from byte ``start`` on."""
    try:
        with path.open("rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")
    except OSError:
        return ""
