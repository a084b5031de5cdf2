"""One real ``toolgate serve`` on loopback for the fuzzers, with the demo keys."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.testing import gateway, make_project


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fuzz")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    with gateway(config) as url:
        yield url
