"""Fixtures of the integration tests: gateway processes started once per module."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from gateway.store.store import Store
from tests.integration.helpers import Cluster, replica_project, start_replicas

OTHER_NODE = {"TOOLGATE_NODE_ID": "another-node"}
"""The environment of a replica that passes for another machine: its pids are not ours."""


@pytest.fixture(scope="module")
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
