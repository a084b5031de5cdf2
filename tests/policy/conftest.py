"""Fixtures for the policy tests: the shipped sources, the backend, scratch policies."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources, load_policy_sources
from tests.policy.helpers import REPO, WritePolicy


@pytest.fixture(scope="session")
def shipped() -> PolicySources:
    """The repository's rego/ and policies/."""
    return load_policy_sources(REPO / "rego", REPO / "policies")


@pytest.fixture
def policy(shipped: PolicySources) -> Iterator[EmbeddedPolicy]:
    """The embedded backend over the shipped sources."""
    backend = EmbeddedPolicy(shipped)
    yield backend
    asyncio.run(backend.aclose())


@pytest.fixture
def write_policy(tmp_path: Path) -> WritePolicy:
    """Write scratch ``rego/`` and ``policies/`` dirs; returns (rego_dir, policies_dir)."""

    def write(
        rego: dict[str, str] | None = None, data: dict[str, str] | None = None
    ) -> tuple[Path, Path]:
        rego_dir, policies_dir = tmp_path / "rego", tmp_path / "policies"
        rego_dir.mkdir(exist_ok=True)
        policies_dir.mkdir(exist_ok=True)
        for name, text in (rego or {}).items():
            (rego_dir / name).write_text(textwrap.dedent(text), encoding="utf-8")
        for name, text in (data or {}).items():
            (policies_dir / name).write_text(textwrap.dedent(text), encoding="utf-8")
        return rego_dir, policies_dir

    return write


@pytest.fixture
def scratch(write_policy: WritePolicy) -> Callable[[str], PolicySources]:
    """Load a one-module scratch policy (package toolgate) with empty data."""

    def load(rego: str) -> PolicySources:
        return load_policy_sources(*write_policy({"policy.rego": rego}))

    return load
