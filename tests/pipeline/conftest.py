"""Fixtures of the pipeline's unit tests: the shipped catalogue and a real SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.store.store import Store
from gateway.testing import load_catalogue
from tests.helpers import REPO


@pytest.fixture
def catalogue() -> Catalogue:
    return load_catalogue(REPO / "tools.d")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    await s.open()
    yield s
    await s.aclose()
