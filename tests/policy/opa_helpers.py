"""The OPA backend against the loopback stand-in: fixtures shared by the OPA tests."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gateway.policy import bundle
from gateway.policy.loader import PolicySources
from gateway.policy.opa import OpaPolicy
from gateway.policy.standin import StandIn


@contextmanager
def standin(sources: PolicySources, cls: type[StandIn] = StandIn) -> Iterator[StandIn]:
    """A stand-in OPA on loopback serving the bundle of ``sources``."""
    built = bundle.build(sources)
    files = bundle.read(built.data)
    server = cls(bundle.sources_of(files), built.revision).start()
    try:
        yield server
    finally:
        server.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def decide_all(
    sources: PolicySources, url: str, documents: list[dict[str, Any]], **kwargs: Any
) -> list[Any]:
    """Open an OpaPolicy on ``url``, decide each document, close it."""
    backend = OpaPolicy(sources, url, **kwargs)
    await backend.open()
    try:
        return [await backend.decide(copy.deepcopy(d)) for d in documents]
    finally:
        await backend.aclose()
