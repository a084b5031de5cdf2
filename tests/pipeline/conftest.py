"""Fixtures of the pipeline's unit tests: the shipped catalogue, a real SQLite store, and the
runtime of a call that succeeds and is allowed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.pipeline.services import Services
from gateway.store.store import Store
from gateway.testing import load_catalogue
from tests.helpers import REPO
from tests.pipeline.fakes import FunctionAdapter, FunctionPolicy, allow_all, make_services, ok


@pytest.fixture
def catalogue() -> Catalogue:
    return load_catalogue(REPO / "tools.d")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    await s.open()
    yield s
    await s.aclose()


@pytest.fixture
def services(tmp_path: Path, store: Store, catalogue: Catalogue) -> Services:
    """The runtime most stage tests need: an adapter that succeeds, a policy that allows."""
    return make_services(tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all))
