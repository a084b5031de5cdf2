"""This process's signals: the workers' wake-up, the executions' cancel signals, the
registry of the executions running here, and the generations a reload swaps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

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
        event = self._events.get(execution_id)
        if event is None:  # not setdefault: an anyio.Event is not free, and a call registers twice
            event = self._events[execution_id] = anyio.Event()
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
    adds a claimed one before running it. Counted: one execution may have two flows here at
    once (a second resume of its approval, which writes nothing and ends first; a worker and
    the flow it runs), and it stays running until the last of them has ended."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def add(self, execution_id: str) -> None:
        ids = self._ids
        ids[execution_id] = ids.get(execution_id, 0) + 1

    def discard(self, execution_id: str) -> None:
        ids = self._ids
        left = ids.get(execution_id, 0) - 1
        if left > 0:
            ids[execution_id] = left
        else:
            ids.pop(execution_id, None)

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)


T = TypeVar("T")


class Generations(Generic[T]):
    """The newest generation of what a reload replaces, and who still uses the older ones.

    A lease holds the newest generation for as long as a call (a flow, a plan, a recovery)
    runs on it: the call sees one generation from its start to its end, whatever reloads
    happen meanwhile. ``swap`` makes a new generation the newest (one reference replaced);
    the one it replaces is retired, and ``drained`` hands it over once no lease holds it, so
    that what it alone holds (adapters, a policy backend) can be closed.
    """

    __slots__ = ("_current", "_number", "_on_release", "_retired", "_users")

    def __init__(self) -> None:
        self._current: T | None = None
        self._number = 0
        self._users: dict[int, int] = {}
        self._retired: dict[int, T] = {}
        self._on_release: Callable[[], None] | None = None

    @property
    def current(self) -> T | None:
        """The newest generation (None before the first ``swap``)."""
        return self._current

    @property
    def number(self) -> int:
        """The newest generation's number: 1 for the one the process started with, one more
        per swap (0 before the first)."""
        return self._number

    def lease(self, asker: T) -> _Lease[T]:
        """The newest generation, held until the ``with`` block ends, when ``asker`` is one of
        the generations (any: a call that holds an older one gets the newest); else ``asker``
        itself (one built in code, before any swap, or a copy of one made with
        ``dataclasses.replace``, as tests and benchmarks make)."""
        return _Lease(self, asker)

    def _hold(self, asker: T) -> tuple[int, T]:
        number = self._number
        self._users[number] = self._users.get(number, 0) + 1
        current = self._current
        if current is None or asker is current:
            return number, asker
        known = any(asker is generation for generation in self._retired.values())
        return number, current if known else asker

    def _release(self, number: int) -> None:
        left = self._users[number] - 1
        if left:
            self._users[number] = left
            return
        del self._users[number]
        if number in self._retired and self._on_release is not None:
            self._on_release()

    def swap(self, newer: T) -> None:
        """Make ``newer`` the newest generation; the one it replaces is retired."""
        if self._current is not None:
            self._retired[self._number] = self._current
        self._current = newer
        self._number += 1

    def on_release(self, hook: Callable[[], None] | None) -> None:
        """Call ``hook`` when the last lease of a retired generation ends."""
        self._on_release = hook

    def drained(self) -> list[T]:
        """The retired generations no lease holds any more, forgotten from now on."""
        done = [n for n in self._retired if n not in self._users]
        return [self._retired.pop(n) for n in done]

    def alive(self) -> list[T]:
        """The newest generation and the retired ones still leased."""
        found = [self._retired[n] for n in sorted(self._retired) if n in self._users]
        return found + ([self._current] if self._current is not None else [])

    def retired(self) -> list[T]:
        """Every retired generation not handed over yet (leased or not)."""
        return [self._retired[n] for n in sorted(self._retired)]


class _Lease(Generic[T]):
    """``with generations.lease(fallback) as held:`` (a class, not a generator: every call
    takes one)."""

    __slots__ = ("_asker", "_generations", "_number")

    def __init__(self, generations: Generations[T], asker: T) -> None:
        self._generations = generations
        self._asker = asker
        self._number = -1

    def __enter__(self) -> T:
        self._number, held = self._generations._hold(self._asker)
        return held

    def __exit__(self, *exc: object) -> None:
        self._generations._release(self._number)
