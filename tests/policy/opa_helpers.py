"""The OPA backend against the loopback stand-in: fixtures shared by the OPA tests."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gateway.errors import PolicyUnavailable
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


class Hanging(StandIn):
    """A stand-in that never answers a POST to ``hangs`` (a Data API path) until it stops,
    and counts the requests it holds at once (``most_in_flight``)."""

    hangs = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.in_flight = self.most_in_flight = 0
        self._count = threading.Lock()

    def answer(self, method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
        if method != "POST" or not target.startswith(self.hangs):
            return super().answer(method, target, body)
        with self._count:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.release.wait()
        finally:
            with self._count:
                self.in_flight -= 1
        return 503, "text/plain", b"stopped"

    def stop(self) -> None:
        self.release.set()
        super().stop()


class Recording(StandIn):
    """A stand-in that records every request it receives (``seen``: method and target),
    whatever its method or path, and answers as OPA would (allowing what the policy allows)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[str, str]] = []

    def answer(self, method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
        self.seen.append((method, target))
        return super().answer(method, target, body)


ALLOW = b'{"result": {"result": "allow", "reasons": []}, "decision_id": "redirected"}'


class Redirecting(StandIn):
    """OPA, or a proxy in front of it, that answers every request ``status`` with ``Location``
    the same path on ``to`` (another origin), and an allowing decision as the body."""

    status = 307
    to = ""

    def answer(self, method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
        return self.status, "application/json", ALLOW

    def headers(self, method: str, target: str) -> dict[str, str]:
        return {"Location": self.to + target}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def decide_all(
    sources: PolicySources, url: str, documents: list[dict[str, Any]], **kwargs: Any
) -> list[Any]:
    """Open an OpaPolicy on ``url``, decide each document, close it: each Decision, or the
    PolicyUnavailable raised for it."""
    backend = OpaPolicy(sources, url, **kwargs)
    await backend.open()
    out: list[Any] = []
    try:
        for document in documents:
            try:
                out.append(await backend.decide(copy.deepcopy(document)))
            except PolicyUnavailable as exc:
                out.append(exc)
        return out
    finally:
        await backend.aclose()
