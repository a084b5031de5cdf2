"""Fakes for the pipeline's extension points, each backed by a function (like httpx's
MockTransport). For unit tests of the pipeline's logic only; integration tests use the
real adapters and the real policy engine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import anyio

from gateway.adapters.base import AdapterCall, AdapterOutcome
from gateway.types import JSON, Decision, DecisionResult


class FunctionAdapter:
    """An adapter whose execute and probe are the given functions; it counts calls."""

    name: ClassVar[str] = "file"

    def __init__(
        self,
        execute: Callable[[AdapterCall], Awaitable[AdapterOutcome]],
        probe: Callable[[str, Mapping[str, str], AdapterCall], Awaitable[JSON]] | None = None,
    ) -> None:
        self._execute, self._probe = execute, probe
        self.calls: list[AdapterCall] = []

    async def execute(self, call: AdapterCall) -> AdapterOutcome:
        self.calls.append(call)
        return await self._execute(call)

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        if self._probe is None:
            return None
        return await self._probe(name, params, call)

    async def aclose(self) -> None:
        return None


class FunctionPolicy:
    def __init__(self, decide: Callable[[Mapping[str, Any]], Decision]) -> None:
        self._decide = decide
        self.inputs: list[Mapping[str, Any]] = []

    async def decide(self, document: Mapping[str, Any]) -> Decision:
        self.inputs.append(document)
        return self._decide(document)

    async def aclose(self) -> None:
        return None


def allow_all(_: Mapping[str, Any]) -> Decision:
    return Decision(DecisionResult.ALLOW, ("test: allow",))


async def slow(call: AdapterCall) -> AdapterOutcome:
    """An adapter that outlasts the tests' deadlines: it is always stopped first."""
    await anyio.sleep(5)
    raise AssertionError("not reached")
