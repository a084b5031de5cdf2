"""Live event streams (Server-Sent Events) of an execution and of a run.

The stream polls the store, so an event committed by any gateway process on the same
database reaches every stream: each poll reads at most ``PAGE_EVENTS`` events, waits
``stream_poll_interval`` when nothing is new, and sends a comment line (a heartbeat) after
``stream_heartbeat`` of silence so proxies keep the connection open. An execution's stream
ends once the execution is ``settled`` and every event it has was sent; a run's stream ends
once every execution of the run has ended that way. Every stream also ends after
``stream_max_duration``: the client reconnects with ``Last-Event-ID`` and misses nothing.

An execution's event ``id`` is its ``seq``. A run's is the cursor of the whole run, one
``execution_id:seq`` per execution it has sent events of, so that ``Last-Event-ID`` resumes
every execution without gaps or duplicates. A run's JSON answer (a page) gives the same
cursor, and takes it back as ``?after=``, as a run's stream does too.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.errors import MalformedRequest
from gateway.events.model import Event
from gateway.runtime.admission import Gauge
from gateway.runtime.container import Runtime
from gateway.service import executions
from gateway.service.executions import PAGE_EVENTS
from gateway.store.records import ExecutionRecord, RunMember
from gateway.types import Outcome

MAX_CURSOR_CHARS = 8192
MAX_SEQ = 2**63 - 1
"""The largest ``seq`` a store holds (a signed 64-bit integer on both backends): a cursor
beyond it names no event and could not be bound to a query."""
_MAX_SEQ_DIGITS = len(str(MAX_SEQ))
_ID = re.compile(r"[A-Za-z0-9_]+")
"""An execution id as a cursor names it (``ex_`` and hex digits): nothing a stream's ``id:``
line would carry that is not an id (a line break, say)."""

Render = Callable[[Event], str]
"""An event as the ``data:`` of an SSE message (JSON for the API, HTML for the page)."""


def settled(record: ExecutionRecord | RunMember | None) -> bool:
    """Whether nothing more will be logged of an execution, so that its stream ends once it
    has sent every event: it is gone, or terminal with an outcome nobody can change. An
    ``unknown`` outcome is not settled: a person may still resolve it (``outcome.resolved``,
    after ``tool.completed``). The one definition of a stream's end, whoever follows it (an
    execution's stream, a run's, the page)."""
    return record is None or (record.terminal and record.outcome != Outcome.UNKNOWN)


def wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


def event_json(event: Event) -> str:
    return json.dumps(event.to_json(), separators=(",", ":"), ensure_ascii=False)


@dataclass
class Cursor:
    """What a stream has sent: the last seq per execution."""

    seqs: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        return ",".join(f"{ex}:{seq}" for ex, seq in self.seqs.items())

    def keep(self, ids: Iterable[str]) -> None:
        """Only the positions of ``ids`` (a run's executions the caller may see), in their
        order: a pair the client sent for another execution is not given back."""
        self.seqs = {ex: self.seqs[ex] for ex in ids if ex in self.seqs}

    def merge(self, other: Cursor) -> Cursor:
        """Both cursors' positions, the later of the two where both name an execution."""
        for ex, seq in other.seqs.items():
            self.seqs[ex] = max(seq, self.seqs.get(ex, -1))
        return self


def seq_of(raw: str) -> int | None:
    """``raw`` as an event's ``seq``: ASCII digits naming 0 to ``MAX_SEQ``; None otherwise.
    The one parser of every cursor (``?after=``, ``Last-Event-ID``, a run's pairs)."""
    if not raw.isascii() or not raw.isdecimal():
        return None
    digits = raw.lstrip("0") or "0"
    if len(digits) > _MAX_SEQ_DIGITS:  # bounded before int(): no work on a huge number
        return None
    value = int(digits)
    return value if value <= MAX_SEQ else None


def after_seq(raw: str | None) -> int:
    """``?after=SEQ`` of an execution's events: -1 (from the start) when absent."""
    if raw is None:
        return -1
    return _seq(raw, "after must be the seq of an event you have", "invalid_after")


def execution_cursor(raw: str | None) -> int:
    """``Last-Event-ID`` of an execution stream: the last seq the client has."""
    if raw is None or not raw.strip():
        return -1
    what = "Last-Event-ID is the seq of the last event you have"
    return _seq(raw.strip(), what, "invalid_last_event_id")


def _seq(raw: str, what: str, code: str) -> int:
    found = seq_of(raw)
    if found is None:
        raise MalformedRequest(f"{what} (an integer from 0 to {MAX_SEQ})", code=code)
    return found


def run_cursor(raw: str | None) -> Cursor:
    """``Last-Event-ID`` of a run stream: ``execution_id:seq`` pairs, comma-separated."""
    if raw is None or not raw.strip():
        return Cursor()
    what = "the id of the last event you have"
    return _pairs(raw.strip(), "Last-Event-ID of a run stream", what, "invalid_last_event_id")


def run_after(raw: str | None) -> Cursor:
    """``?after=`` of a run's events: the ``cursor`` of the page before (or a stream's
    ``Last-Event-ID``); from the start when absent."""
    if raw is None:
        return Cursor()
    return _pairs(raw, "after", "the cursor of the page you have", "invalid_after")


def _pairs(raw: str, name: str, what: str, code: str) -> Cursor:
    """The one parser of a run's cursor, ``execution_id:seq`` pairs, comma-separated."""
    if len(raw) > MAX_CURSOR_CHARS:
        raise MalformedRequest(f"{name} is too long", code=code)
    cursor = Cursor()
    for part in raw.split(","):
        ex, sep, seq = part.partition(":")
        found = seq_of(seq)
        if not sep or not _ID.fullmatch(ex) or found is None:
            raise MalformedRequest(
                f"{name} is {what} (execution_id:seq pairs, comma-separated, each id of "
                f"ASCII letters, digits and underscores, each seq from 0 to {MAX_SEQ})",
                code=code,
            )
        cursor.seqs[ex] = found
    return cursor


def _message(event_id: str, event: Event, render: Render) -> str:
    data = "\n".join(f"data: {line}" for line in render(event).splitlines() or [""])
    return f"id: {event_id}\nevent: {event.type}\n{data}\n\n"


def respond(request: Request, principal: str, body: AsyncIterator[str], slots: Gauge) -> Response:
    """The streaming response, holding the principal's stream slot (taken by the caller from
    ``Runtime.admission.streams``); the slot is given back when the response ends, however
    it ends (the client may go before the stream starts)."""

    async def framed() -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        async for chunk in body:
            yield chunk

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return _SlotResponse(framed(), slots, principal, headers)


class _SlotResponse(StreamingResponse):
    def __init__(
        self, body: AsyncIterator[str], slots: Gauge, principal: str, headers: dict[str, str]
    ) -> None:
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self.slots, self.principal = slots, principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slots.give_back(self.principal)


class _Clock:
    def __init__(self, services: Runtime) -> None:
        settings = services.settings
        self.poll = settings.stream_poll_interval
        self.heartbeat = settings.stream_heartbeat
        self.ends = time.monotonic() + settings.stream_max_duration
        self.quiet_since = time.monotonic()

    def over(self) -> bool:
        return time.monotonic() >= self.ends

    def sent(self) -> None:
        self.quiet_since = time.monotonic()

    async def idle(self) -> str | None:
        """Wait one poll interval; a heartbeat comment when the stream was quiet too long."""
        await anyio.sleep(self.poll)
        if time.monotonic() - self.quiet_since >= self.heartbeat:
            self.sent()
            return ": heartbeat\n\n"
        return None


async def execution_stream(
    services: Runtime, execution_id: str, after: int, render: Render = event_json
) -> AsyncIterator[str]:
    """The events of one execution after seq ``after``, as they are committed."""
    clock = _Clock(services)
    while not clock.over():
        # read before its events: settled then, the events read after are all there are
        ended = settled(await services.store.get_execution(execution_id))
        events = await services.store.events_page(execution_id, after, PAGE_EVENTS)
        for event in events:
            after = event.seq
            yield _message(str(event.seq), event, render)
        if events:
            clock.sent()
        if len(events) < PAGE_EVENTS:
            if ended:
                return
            beat = await clock.idle()
            if beat:
                yield beat


async def run_stream(
    services: Runtime, principal: str, run_id: str, cursor: Cursor, render: Render = event_json
) -> AsyncIterator[str]:
    """The events of every execution of ``run_id`` ``principal`` may see, as they are
    committed; ends once every one of them is settled and its events were sent."""
    clock = _Clock(services)
    done: set[str] = set()
    while not clock.over():
        records = await executions.run_executions(services, principal, run_id)
        cursor.keep(r.id for r in records)
        busy = False
        for record in records:
            if record.id in done:
                continue
            after = cursor.seqs.get(record.id, -1)
            events = await services.store.events_page(record.id, after, PAGE_EVENTS)
            for event in events:
                cursor.seqs[record.id] = event.seq
                yield _message(cursor.text(), event, render)
            if events:
                clock.sent()
            if len(events) >= PAGE_EVENTS:
                busy = True
            elif settled(record):
                done.add(record.id)
        if records and all(r.id in done for r in records):
            return
        if not busy:
            beat = await clock.idle()
            if beat:
                yield beat
