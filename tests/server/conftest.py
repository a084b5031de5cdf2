from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings
from tests.conftest import ALICE

_calls = itertools.count()


def auth(key: str = ALICE) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def body(tool: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A valid execution request for alice in workspace demo."""
    out: dict[str, Any] = {
        "run_id": "run-1",
        "turn_id": "t1",
        "call_id": f"c{next(_calls)}",
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "coder"},
        "workspace": {"id": "demo"},
    }
    out.update(extra)
    return out


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client
