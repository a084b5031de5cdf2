"""One real ``toolgate serve`` on loopback for the cross-principal corpus, with the demo keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import gateway, make_project
from tests.helpers import starts_processes


@pytest.fixture(scope="module")
@starts_processes
def served_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("security")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    with gateway(config) as url:
        yield url, config
