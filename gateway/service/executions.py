"""The executions a principal may see: read one, find several, wait for one to end.

One rule of visibility for every door (REST, MCP's status tool, the page, the CLI and the
kit through REST): a principal sees its own executions, and an approver (a principal the
policy data lets list approvals) sees every execution. An execution another principal may
not see is answered as one that does not exist. A parked execution is always given with its
pending approval, whether it is read by id or found by run and call id, so that an agent
recovering from a lost answer learns the approval's id and page either way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import NamedTuple

import anyio

from gateway.errors import MalformedRequest, NotFound
from gateway.events.model import Event
from gateway.runtime.container import Runtime
from gateway.store.records import ApprovalRecord, ExecutionRecord, RunMember

MAX_WAIT_S = 60.0
"""The longest a caller may wait for an end in one request (``?wait=``, the status tool)."""

FIND_LIMIT = 100
"""The most executions one find answers."""

MAX_RUN_EXECUTIONS = 100
"""The executions of a run whose events are read or followed (the newest, as a find)."""

PAGE_EVENTS = 200
"""The most events one answer of a run's events, or of an execution's, holds, and one poll
of a live stream reads of an execution: each request's work bounded whatever the log holds
(measured on a run of 100 calls of 256 KiB output each: 0.9 MiB in about 15 ms a page,
where the whole run was 26 MiB in 300 ms and 8 readers at once took the gateway from 170 to
570 MiB)."""

PAGE_BYTES = 1024 * 1024
"""The most bytes of event ``data`` (as the store keeps it) one answer of a run's events, or
of an execution's, holds past its first event: what 200 events of large output would
otherwise make tens of MiB. CloudWatch Logs' ``GetLogEvents`` pages alike (1 MB, or a
count)."""


class Seen(NamedTuple):
    """An execution as a door shows it: the record and its approval, if it has one."""

    record: ExecutionRecord
    approval: ApprovalRecord | None


def may_see(services: Runtime, principal: str, record: ExecutionRecord | RunMember) -> bool:
    """Its owner, and approvers (by the policy data), see an execution."""
    return record.principal == principal or services.policy_data.may_list_approvals(principal)


async def find_visible(
    services: Runtime, principal: str, execution_id: str
) -> ExecutionRecord | None:
    """Execution ``execution_id`` if ``principal`` may see it, else None (unknown and
    invisible alike). Ids are ASCII: any other text names none (and is not sent to the
    store, which could not encode a lone surrogate)."""
    if not execution_id.isascii():
        return None
    record = await services.store.get_execution(execution_id)
    if record is None or not may_see(services, principal, record):
        return None
    return record


async def visible(services: Runtime, principal: str, execution_id: str) -> ExecutionRecord:
    """Execution ``execution_id``, or ``NotFound`` when ``principal`` may not see it."""
    record = await find_visible(services, principal, execution_id)
    if record is None:
        raise NotFound("no such execution")
    return record


async def approval_of(services: Runtime, record: ExecutionRecord) -> ApprovalRecord | None:
    if record.approval_id is None:
        return None
    return await services.store.get_approval(record.approval_id)


async def seen(services: Runtime, record: ExecutionRecord) -> Seen:
    return Seen(record, await approval_of(services, record))


async def find(
    services: Runtime, principal: str, run_id: str | None, call_id: str | None
) -> list[Seen]:
    """The caller's own executions of ``run_id`` (and ``call_id``), newest first, each with
    its approval: the same shape as reading one by id."""
    records = await services.store.find_executions(principal, run_id, call_id, FIND_LIMIT)
    return [await seen(services, record) for record in records]


SECONDS = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""A wait's text: a decimal number of ASCII digits, as JSON writes one (a leading dot, a
trailing one and an exponent too); nothing around it."""


def wait_seconds(value: object, name: str = "wait") -> float:
    """How long a caller asked to wait for an end (``?wait=`` of REST, ``wait_s`` of MCP's
    status tool; None: not at all): a number, or its text, from 0 to ``MAX_WAIT_S``; else
    400 ``invalid_wait``, naming the parameter ``name``, at every door alike."""
    if value is None:
        return 0.0
    not_a_number = MalformedRequest(f"{name} must be a number of seconds", code="invalid_wait")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise not_a_number
    if isinstance(value, str) and not SECONDS.fullmatch(value):
        raise not_a_number  # float() would take " 5", "5_0" (50) and "\u0665" (Arabic-Indic 5)
    try:
        wait = float(value)
    except OverflowError:  # an integer past any float: past the bound too
        wait = math.inf
    if not 0 <= wait <= MAX_WAIT_S:
        raise MalformedRequest(
            f"{name} must be between 0 and {MAX_WAIT_S:g} seconds", code="invalid_wait"
        )
    return wait


async def wait_for_end(
    services: Runtime, principal: str, record: ExecutionRecord, wait: float
) -> ExecutionRecord:
    """``record`` as it is once terminal, or after ``wait`` seconds (at most
    ``MAX_WAIT_S``), read again from the store with a growing pause: a call finished by
    another replica is seen too. Holds one of the principal's waiter slots meanwhile
    (``admission.waiters``: ``LimitExceeded`` beyond)."""
    if record.terminal or wait <= 0:
        return record
    with services.admission.waiters.hold(principal), anyio.move_on_after(min(wait, MAX_WAIT_S)):
        delay = 0.02
        while not record.terminal:
            await anyio.sleep(delay)
            delay = min(delay * 1.5, 0.5)
            record = await services.store.get_execution(record.id) or record
    return record


async def latest(services: Runtime, record: ExecutionRecord) -> ExecutionRecord:
    """``record`` as the store holds it now (itself if it is gone)."""
    return await services.store.get_execution(record.id) or record


class EventPage(NamedTuple):
    """One answer of an execution's events, and whether more remained past its bounds."""

    events: list[Event]
    more: bool


async def events(services: Runtime, record: ExecutionRecord, after: int = -1) -> EventPage:
    """The event log of ``record`` (one the caller may see) after seq ``after``, a page at a
    time: the bounds and the store reader of a run's page (an execution that streams output
    slowly has thousands of events; the next page begins after the last ``seq`` given)."""
    page = [(record.id, after)]
    found, more = await services.store.bounded_events_page(page, PAGE_EVENTS, PAGE_BYTES)
    return EventPage(found, more)


class RunPage(NamedTuple):
    """One answer of a run's events: the events, the last seq the caller then has of each
    execution (``cursor``: send it back as ``after``), and whether more remained past the
    page's bounds."""

    events: list[Event]
    cursor: dict[str, int]
    more: bool


async def run_executions(services: Runtime, principal: str, run_id: str) -> list[RunMember]:
    """The executions of ``run_id`` ``principal`` may see, in the order they were made (the
    newest ``MAX_RUN_EXECUTIONS``): what a run's events are read from, page or stream."""
    records = await services.store.run_members(run_id, MAX_RUN_EXECUTIONS)
    seen = (r for r in records if may_see(services, principal, r))
    return sorted(seen, key=lambda r: (r.created_ms, r.id))


async def run_events(
    services: Runtime, principal: str, run_id: str, after: Mapping[str, int]
) -> RunPage:
    """The events of a run's executions ``principal`` may see, those after ``after`` (the
    last seq the caller has of each execution), execution after execution: at most
    ``PAGE_EVENTS`` events and ``PAGE_BYTES`` of their data (a larger event comes alone).
    Only the executions with events past their cursor are read, each no further than the
    page has room for."""
    records = await run_executions(services, principal, run_id)
    positions = [
        (r.id, after.get(r.id, -1))
        for r in records
        if r.last_seq is not None and r.last_seq > after.get(r.id, -1)
    ]
    events, more = await services.store.bounded_events_page(positions, PAGE_EVENTS, PAGE_BYTES)
    sent = {event.execution_id: event.seq for event in events}  # the last of each
    cursor = {
        r.id: sent.get(r.id, after.get(r.id, -1)) for r in records if r.id in sent or r.id in after
    }
    return RunPage(events, cursor, more)


async def browse(
    services: Runtime, principal: str, run_id: str | None, limit: int
) -> list[ExecutionRecord]:
    """The newest executions ``principal`` may see (every principal's for an approver), of
    ``run_id`` when given: what the page lists."""
    everyone = services.policy_data.may_list_approvals(principal)
    return await services.store.find_executions(
        None if everyone else principal, run_id, None, limit
    )
