"""Adapter output streamed as ``tool.output`` events: batched, bounded, best effort.

Output events do not decide recovery, so they are flushed every ``interval`` seconds (and
at the end) rather than one write per chunk; past ``max_bytes`` the rest is counted, not
stored. The adapter's own output budget still governs what goes into the result.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio

from gateway.errors import StoreError, ToolgateError
from gateway.events.model import Event, make_event
from gateway.store.store import Store

log = logging.getLogger("toolgate.output")


class OutputSink:
    def __init__(
        self,
        store: Store,
        execution_id: str,
        first_seq: int,
        *,
        max_bytes: int = 256 * 1024,
        interval: float = 0.25,
        durable: bool = True,
    ) -> None:
        self._store, self._execution_id = store, execution_id
        self._seq = first_seq
        self._max_bytes, self._interval = max_bytes, interval
        self._pending: list[tuple[str, str]] = []
        self._durable = durable
        self.kept: list[Event] = []
        """Output events of a non-durable call, for the final commit to write in order."""
        self.stored_bytes = 0

    @property
    def next_seq(self) -> int:
        return self._seq

    def emit(self, stream: str, text: str) -> None:
        """Called by adapters, from the event loop thread, for each chunk of output."""
        size = len(text.encode("utf-8", "replace"))
        room = self._max_bytes - self.stored_bytes
        if room <= 0:
            return
        if size > room:
            text = text.encode("utf-8", "replace")[:room].decode("utf-8", "ignore")
            size = room
        self.stored_bytes += size
        if self._pending and self._pending[-1][0] == stream:
            self._pending[-1] = (stream, self._pending[-1][1] + text)
        else:
            self._pending.append((stream, text))

    async def checkpoint(self, state: Mapping[str, Any]) -> None:
        """Append a durable ``state.checkpointed`` event with adapter state (not batched).

        A store that cannot take it is logged, not raised into the adapter: the work it
        began goes on and its result is recorded once the store is back for the commit
        (docs/failures.md, store unavailable). Raised, it failed the call with the store's
        error after the adapter had stopped what it began. Recovery does without the state
        (the process adapter finds a tree by its marker)."""
        await self.flush()
        event = make_event(
            self._execution_id, self._seq, "state.checkpointed", {"adapter": dict(state)}
        )
        self._seq += 1
        try:
            await self._store.append(self._execution_id, [event])
        except StoreError as exc:
            log.warning("could not checkpoint the adapter of %s: %s", self._execution_id, exc)

    async def run(self, elapsed: float = 0.0) -> None:
        """Flush periodically until cancelled (``elapsed``: seconds the call has run)."""
        wait = max(self._interval - elapsed, 0.0)
        while True:
            await anyio.sleep(wait)
            await self.flush()
            wait = self._interval

    async def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        events: list[Event] = []
        for stream, text in pending:
            events.append(
                make_event(
                    self._execution_id, self._seq, "tool.output", {"stream": stream, "text": text}
                )
            )
            self._seq += 1
        if not self._durable:
            self.kept.extend(events)
            return
        try:
            await self._store.append(self._execution_id, events)
        except ToolgateError:
            log.warning("dropped %d output events of %s", len(events), self._execution_id)
