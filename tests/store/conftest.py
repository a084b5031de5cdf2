"""Fixtures of the store's tests: a store on each database ``database_url`` names."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.store.store import Store


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store(database_url)
    await s.open()
    yield s
    await s.aclose()
