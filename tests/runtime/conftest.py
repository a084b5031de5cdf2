"""Fixtures of the runtime's tests: the shipped catalogue and a store on each database
``database_url`` names."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.store.store import Store
from gateway.testing import load_catalogue
from tests.helpers import REPO


@pytest.fixture
def catalogue() -> Catalogue:
    return load_catalogue(REPO / "tools.d")


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store(database_url)
    await s.open()
    yield s
    await s.aclose()
