"""The OPA backend against the loopback stand-in: fixtures shared by the OPA tests."""

from __future__ import annotations

import asyncio
import copy
import time
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


class Misbehaving(StandIn):
    """A stand-in that answers one fixed way (``reply``) or sleeps (``delay``)."""

    reply: tuple[int, str, bytes] | None = None
    delay = 0.0

    def answer(self, method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
        if self.delay:
            time.sleep(self.delay)
        if self.reply is not None and method == "POST":
            return self.reply
        return super().answer(method, target, body)


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
