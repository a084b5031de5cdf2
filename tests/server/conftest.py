from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client
