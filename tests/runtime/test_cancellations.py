"""gateway/runtime/signals.py Cancellations: one cancel signal per execution running here."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.runtime import signals
from gateway.runtime.signals import Cancellations

pytestmark = pytest.mark.anyio


async def test_registering_again_gives_the_same_signal_and_makes_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Any] = []
    real = anyio.Event

    def event() -> anyio.Event:
        made.append(real())
        return made[-1]

    monkeypatch.setattr(signals.anyio, "Event", event)
    cancellations, heard = Cancellations(), []
    first = cancellations.register("ex_1")
    second = cancellations.register("ex_1", lambda: heard.append("ex_1"))
    assert first is second and len(made) == 1  # the lock stage's and the execute stage's
    assert cancellations.signal("ex_1") and first.is_set() and heard == ["ex_1"]
    cancellations.unregister("ex_1")
    assert not cancellations.signal("ex_1")
