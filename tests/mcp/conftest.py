"""One real gateway process on loopback for the MCP tests (helpers: tests/mcp/helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.testing import gateway, make_project, run_agent_code_without_approval
from tests.helpers import starts_processes
from tests.mcp.helpers import Gateway


@pytest.fixture(scope="module")
@starts_processes
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("mcp")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    run_agent_code_without_approval(root, ("proc.python",))
    with gateway(config) as url:
        yield Gateway(url, root)
