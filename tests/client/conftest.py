"""One real gateway process on loopback for the client kit's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import gateway, make_project
from tests.helpers import starts_processes


@pytest.fixture(scope="module")
@starts_processes
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The gateway's base URL and its workspace ``demo``."""
    root = tmp_path_factory.mktemp("client")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    with gateway(config) as url:
        yield url, root / "var" / "workspaces" / "demo"
