"""Fault injection: make the gateway crash, fail or stall at named points, on purpose.

Set ``TOOLGATE_FAULTS`` (or ``faults:`` in toolgate.yaml) to a comma-separated plan of
``point:action``, e.g. ``after_side_effect:crash`` or ``before_commit:delay:500``.
Off unless set. Points: after_reserve, before_adapter, after_side_effect, during_verify,
before_commit, after_commit. Actions: crash (``os._exit``), raise, delay:MS,
store_unavailable. Users chaos-test their own declarations with it (docs/failures.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio

from gateway.errors import ConfigError, StoreError

POINTS = frozenset(
    {
        "after_reserve",
        "before_adapter",
        "after_side_effect",
        "during_verify",
        "before_commit",
        "after_commit",
    }
)
log = logging.getLogger("toolgate.faults")


class InjectedFault(RuntimeError):
    """Raised by the ``raise`` action: an unexpected failure at that point."""


@dataclass(frozen=True)
class Faults:
    plan: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> Faults:
        plan: dict[str, str] = {}
        for item in (text or "").split(","):
            if not item.strip():
                continue
            point, _, action = item.strip().partition(":")
            if point not in POINTS:
                raise ConfigError(f"faults: unknown point {point!r} ({', '.join(sorted(POINTS))})")
            if not (
                action in ("crash", "raise", "store_unavailable") or _delay(action) is not None
            ):
                raise ConfigError(
                    f"faults: unknown action {action!r} for {point} "
                    "(crash, raise, delay:MS, store_unavailable)"
                )
            plan[point] = action
        return cls(plan)

    async def hit(self, point: str) -> None:
        """Act at ``point`` if the plan names it; nothing otherwise."""
        action = self.plan.get(point)
        if action is None:
            return
        log.warning("fault injected at %s: %s", point, action)
        if action == "crash":
            os._exit(86)
        if action == "raise":
            raise InjectedFault(f"fault injected at {point}")
        if action == "store_unavailable":
            raise StoreError(f"the store is unavailable (fault injected at {point})")
        delay = _delay(action)
        if delay is not None:
            await anyio.sleep(delay / 1000)


def _delay(action: str) -> int | None:
    kind, _, ms = action.partition(":")
    return int(ms) if kind == "delay" and ms.isdigit() else None


NO_FAULTS = Faults()
