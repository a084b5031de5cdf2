"""This process's signals: the workers' wake-up, the executions' cancel signals, and the
registry of the executions running here."""

from __future__ import annotations

from collections.abc import Callable

import anyio


class Wakeup:
    """A resettable signal: ``wait`` returns when set (or after a timeout) and re-arms."""

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def set(self) -> None:
        if self._event is not None:
            self._event.set()

    async def wait(self, timeout: float) -> None:
        if self._event is None:
            self._event = anyio.Event()
        with anyio.move_on_after(timeout):
            await self._event.wait()
        if self._event.is_set():
            self._event = anyio.Event()


class Cancellations:
    """The cancel signals of the executions running in this process."""

    def __init__(self) -> None:
        self._events: dict[str, anyio.Event] = {}
        self._listeners: dict[str, Callable[[], None]] = {}

    def register(
        self, execution_id: str, on_signal: Callable[[], None] | None = None
    ) -> anyio.Event:
        """The execution's cancel signal; ``on_signal`` is called (on the event loop) when
        it is signalled."""
        event = self._events.setdefault(execution_id, anyio.Event())
        if on_signal is not None:
            self._listeners[execution_id] = on_signal
        return event

    def unregister(self, execution_id: str) -> None:
        self._events.pop(execution_id, None)
        self._listeners.pop(execution_id, None)

    def signal(self, execution_id: str) -> bool:
        """Tell a running execution to stop; False when it does not run here."""
        event = self._events.get(execution_id)
        if event is None:
            return False
        event.set()
        listener = self._listeners.get(execution_id)
        if listener is not None:
            listener()
        return True


class Running:
    """The executions this process is running now: recovery leaves exactly these alone.

    A flow adds its execution before its first await and discards it when it ends; a worker
    adds a claimed one before running it."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def add(self, execution_id: str) -> None:
        self._ids.add(execution_id)

    def discard(self, execution_id: str) -> None:
        self._ids.discard(execution_id)

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)
