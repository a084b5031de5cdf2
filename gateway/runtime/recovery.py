"""Crash recovery: settle every execution whose owner died while it ran.

On start, and every half ``lock_lease`` after (for other replicas' crashes), the gateway finds
executions left ``running`` or ``cancelling`` whose owner is gone (:func:`takeover`):

- its owner is this process, yet nothing here runs it (it was left behind);
- its owner ran on this node (``gateway.instance.NODE``) and that process no longer exists;
- its owner ran on another node and its lease (``replicas``, renewed by its heartbeat) has
  passed; or, for an owner with no replica row, the execution's own heartbeat is older than
  ``STALE_LEASES`` lock leases.

For each it:

- never re-runs a side effect: one that never reached ``tool.started`` is queued again
  (nothing was attempted, so running it is safe), or, when it ran because its approval was
  approved, parked again with that approval approved again (``unresumed`` then resumes it:
  queued, it would meet the policy without its spent approval and park for a second one),
  or, when a cancel had come, ended ``cancelled``; one that started is settled. What the pass
  read may be stale when it acts (another replica took the call over first and a worker
  started it; the owner was alive after all): each of those moves is made only while the
  owner found gone still has the call and its log has no ``tool.started``, in the
  transaction that makes it (``store.take_over``, ``store.unresume``), and an owner writes
  ``tool.started`` only while it still has the call (``pipeline/execute.py``);
- stops what the adapter left behind only when its pids are provably of this node (the
  adapter's ``recover(states)`` gets every ``state.checkpointed`` adapter state of the pass
  at once, e.g. pid + start time, so that a hundred trees stop together); another node's
  processes are never signalled;
- asks the tool's reconcile probes whether the side effect is in place, and commits
  ``succeeded``, ``failed`` or, when nobody can tell, ``unknown`` (a probe that finds
  nothing proves nothing while another node's processes may still be running: ``unknown``).

:func:`unresumed` finds the calls whose approval was approved more than a lease ago while the
call still waits, parked: the replica that took the decision stopped before it resumed them
(the workers resume them, ``gateway.runtime.worker``), and those whose resume recovery undid.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from gateway.adapters.base import Recovering, SideEffectReport
from gateway.errors import ExecutionError, StoreError, ToolgateError
from gateway.events.model import Event, make_event
from gateway.instance import INSTANCE_ID, NODE, owner_is_gone, process_is_gone
from gateway.pipeline.probes import run_probes
from gateway.pipeline.reconcile import WRITES, with_retryable
from gateway.pipeline.records import Call
from gateway.pipeline.runner import rebuild
from gateway.pipeline.services import Services
from gateway.runtime.closing import close_execution
from gateway.store.records import ApprovalRecord, ExecutionRecord, ReplicaRecord
from gateway.types import Outcome, Status

log = logging.getLogger("toolgate.recovery")
STALE_LEASES = 3
"""For an owner with no replica row: an execution heartbeat older than this many lock leases
means the owner on another host is gone."""


@dataclass(frozen=True, slots=True)
class Takeover:
    """Why an execution is this replica's to settle, and whether its pids are of this node."""

    because: str
    """``left_behind``, ``owner_gone`` (same node, process gone), ``lease_expired`` (another
    node), ``heartbeat_stale`` (an owner with no replica row)."""
    local: bool
    """Its processes ran on this node: recovery may check and stop them."""


def takeover(
    services: Services,
    record: ExecutionRecord,
    replicas: Mapping[str, ReplicaRecord],
    now_ms: int,
) -> Takeover | None:
    """How this replica may take ``record`` over; None while its owner may still run it."""
    if record.id in services.active:
        return None
    owner = record.owner
    if owner == INSTANCE_ID:
        return Takeover("left_behind", True)  # ours, yet no flow runs it: it failed mid-way
    replica = replicas.get(owner) if owner else None
    if replica is not None:
        if replica.node == NODE:  # its pids are ours to check: the process decides
            return Takeover("owner_gone", True) if process_is_gone(replica.id) else None
        return Takeover("lease_expired", False) if replica.expired(now_ms) else None
    gone = owner_is_gone(owner)
    if gone is not None:
        return Takeover("owner_gone", True) if gone else None
    stale_ms = STALE_LEASES * services.settings.lock_lease * 1000
    return Takeover("heartbeat_stale", False) if now_ms - record.updated_ms > stale_ms else None


DECIDING = ("tool.started", "state.checkpointed")
"""The events of an execution's log recovery decides by (whether it started; the adapter
states it recorded)."""
RECOVERY_CONCURRENCY = 16
"""Executions read, probed and settled at once: each waits on the store or a probe."""


async def recover(services: Services) -> list[ExecutionRecord]:
    """Settle every abandoned execution; returns their new states.

    In three steps, on the newest generation of the runtime (held until the pass is done):
    the events that decide are read for every execution at once, and each one that never
    started is queued again; then what the
    started ones left running is stopped, all of an adapter's at once (a hundred process
    trees share one look at the machine's processes a round, and their grace periods run
    side by side, not one after another); then each is probed and committed. Nothing is
    probed before its leftovers were stopped."""
    candidates = await services.store.unfinished([Status.RUNNING, Status.CANCELLING])
    replicas = await services.store.replicas() if candidates else {}
    now = int(time.time() * 1000)
    taken = [(r, why) for r in candidates if (why := takeover(services, r, replicas, now))]
    if not taken:
        return []
    logs = await services.store.events_of_types([r.id for r, _ in taken], DECIDING)
    with services.lease() as latest:
        prepared = await _each(taken, lambda r, why: _prepare(latest, r, why, logs[r.id]))
        settling = [p for p in prepared if isinstance(p, Settling)]
        await _stop_leftovers(latest, settling)
        done = [p for p in prepared if not isinstance(p, Settling)]
        done += await _each([(s.record, s) for s in settling], lambda _, s: _settle(latest, s))
    if (metrics := services.telemetry.metrics) is not None:
        for record in done:
            if record.terminal:
                metrics.recovered(f"settled_{record.outcome}")
            elif record.status in (Status.QUEUED, Status.AWAITING_APPROVAL):
                metrics.recovered("requeued")  # else left alone: another has it now
    return done


T = TypeVar("T")
R = TypeVar("R")


async def _each(
    items: list[tuple[ExecutionRecord, T]],
    step: Callable[[ExecutionRecord, T], Awaitable[R]],
) -> list[R]:
    """``step`` for each execution, several at a time; one that fails is left for the next
    pass (logged) and does not stop the others."""
    out: list[R] = []
    limiter = anyio.CapacityLimiter(RECOVERY_CONCURRENCY)

    async def one(record: ExecutionRecord, item: T) -> None:
        async with limiter:
            try:
                out.append(await step(record, item))
            except ToolgateError as exc:
                log.warning("could not recover %s yet: %s", record.id, exc)
            except Exception:  # one execution's failure must not stop the others
                log.exception("could not recover %s yet", record.id)

    async with anyio.create_task_group() as tg:
        for record, item in items:
            tg.start_soon(one, record, item)
    return out


async def unresumed(services: Services) -> list[ApprovalRecord]:
    """The approvals approved over a lease ago whose call still waits, parked, and runs
    nowhere here: to resume. Whoever resumes one first runs it; a second resume finds the
    approval spent and writes nothing."""
    decided_before = int((time.time() - services.settings.lock_lease) * 1000)
    found = await services.store.unresumed_approvals(decided_before)
    return [a for a in found if a.execution_id not in services.active]


def _note(record: ExecutionRecord, why: Takeover, status: str) -> dict[str, Any]:
    """What the recovery event says: who took the execution over from whom, and why."""
    return {
        "status": status,
        "by": "recovery",
        "replica": INSTANCE_ID,
        "owner": record.owner,
        "because": why.because,
    }


async def _prepare(
    services: Services, record: ExecutionRecord, why: Takeover, events: list[Event]
) -> ExecutionRecord | Settling:
    """Queue ``record`` again if it never started (its new state); else what settling it
    needs: the call rebuilt and the adapter states its log recorded (``events``: its
    ``DECIDING`` events)."""
    started = any(e.type == "tool.started" for e in events)
    if not started:
        return await _unstarted(services, record, why)
    states = [
        e.data["adapter"] for e in events if e.type == "state.checkpointed" and "adapter" in e.data
    ]
    if not states:  # crashed between starting and checkpointing: find it by its marker
        began = next(e.at_ms for e in events if e.type == "tool.started")
        states = [{"marker": record.id, "not_before": began / 1000 - 1}]
    return Settling(
        record, why, _note(record, why, "settling"), await _rebuild(services, record), states
    )


async def _unstarted(
    services: Services, record: ExecutionRecord, why: Takeover
) -> ExecutionRecord | Settling:
    """An execution that had not begun its side effect when its owner went: a cancelled
    one ends ``cancelled``, one resumed on its approval waits on it again, any other is
    queued again. Each move is made only while the owner found gone still has it and it
    has no ``tool.started`` (``store.take_over``): this read of its log may be stale by now
    (another replica took it over first and a worker started it, or the owner was alive
    after all). Then nothing changes here, and a later pass settles what it finds."""
    if record.id in services.active:  # a flow here took it up since the pass read it
        return record
    if record.status is Status.CANCELLING:
        return await _cancelled_unstarted(services, record, why)
    if record.approval_id is not None:
        back = await _back_to_its_approval(services, record, why, record.approval_id)
        if back is not None:
            return back
    note = make_event(record.id, 0, "state.checkpointed", _note(record, why, "queued"))
    if await services.store.take_over(record.id, record.owner, Status.QUEUED, None, [note]):
        services.wake_workers()
        log.info("requeued %s: interrupted before its side effect began", record.id)
    else:
        log.info("left %s alone: another replica or its owner has it now", record.id)
    return await services.store.get_execution(record.id) or record


async def _cancelled_unstarted(
    services: Services, record: ExecutionRecord, why: Takeover
) -> ExecutionRecord:
    """A cancel that came before the side effect began: the call ends ``cancelled``,
    nothing attempted, as its owner would have ended it. Queued again, it would run after
    all. Taken over first (``cancelling``, owned here), so that an owner still alive cannot
    start it meanwhile."""
    note = _note(record, why, "cancelled")
    moved = await services.store.take_over(
        record.id, record.owner, Status.CANCELLING, INSTANCE_ID, []
    )
    if not moved:
        log.info("left %s alone: another replica or its owner has it now", record.id)
        return await services.store.get_execution(record.id) or record
    error = ExecutionError(
        "cancelled before the adapter started (the gateway running it stopped)",
        code="cancelled",
    )
    effect = SideEffectReport(False, False, "cancelled before the side effect began")
    log.info("cancelled %s: a cancel came before its side effect began", record.id)
    return await close_execution(
        services,
        record._replace(owner=INSTANCE_ID),
        Outcome.CANCELLED,
        error,
        effect,
        before=[("state.checkpointed", note)],
    )


async def _back_to_its_approval(
    services: Services, record: ExecutionRecord, why: Takeover, approval_id: str
) -> ExecutionRecord | None:
    """An approved call resumed by a replica that stopped before its side effect began: it
    waits again, parked, its approval approved again, and the workers resume it as any call
    approved and left parked (``unresumed``): it runs once, on the approval it was given.
    Queued instead, its worker would run the policy again without that approval (spent) and
    park it for a second approval nobody knows of. None when it was not so resumed (the
    caller requeues it as any other)."""
    note = make_event(record.id, 0, "state.checkpointed", _note(record, why, "awaiting_approval"))
    if not await services.store.unresume(record.id, approval_id, [note], record.owner):
        return None
    log.info(
        "%s waits again on approval %s (approved): its resume was interrupted before its "
        "side effect began; it is resumed again",
        record.id,
        approval_id,
    )
    return await services.store.get_execution(record.id) or record


@dataclass(frozen=True, slots=True)
class Settling:
    """A started execution recovery settles: the note its log gets first, its call (None
    when it cannot be rebuilt) and the adapter states it recorded."""

    record: ExecutionRecord
    why: Takeover
    note: dict[str, Any]
    call: Call | None
    states: list[Any]


async def _stop_leftovers(services: Services, settling: list[Settling]) -> None:
    """Stop what the started executions left running, where their pids are provably of
    this node: one ``recover`` per adapter with every state of this pass, the adapters side
    by side. A failure is logged; the probes then decide as before."""
    by_adapter: dict[str, tuple[Recovering, list[Settling]]] = {}
    for s in settling:
        if s.call is None or not s.why.local:
            continue
        adapter = services.adapters.get(s.call.tool.adapter)
        if isinstance(adapter, Recovering):
            by_adapter.setdefault(s.call.tool.adapter, (adapter, []))[1].append(s)
    async with anyio.create_task_group() as tg:
        for recovering, group in by_adapter.values():
            tg.start_soon(_stop_group, recovering, group)


async def _stop_group(adapter: Recovering, group: list[Settling]) -> None:
    ids = ", ".join(s.record.id for s in group)
    try:
        await adapter.recover([state for s in group for state in s.states])
    except ToolgateError as exc:
        log.warning("could not stop what %s left running: %s", ids, exc)
    except Exception:
        log.exception("could not stop what %s left running", ids)


async def _settle(services: Services, settling: Settling) -> ExecutionRecord:
    """Probe and commit one started execution, its leftovers stopped; never left unsettled
    unless nothing can be recorded (a ``StoreError``: the next pass tries again)."""
    try:
        return await _settle_started(services, settling)
    except StoreError:
        raise
    except Exception:  # no exception leaves a started execution unsettled
        log.exception("recovering %s failed; settling it unknown", settling.record.id)
        return await _close_unknown(services, settling, "recovering it failed", ())


async def _settle_started(services: Services, settling: Settling) -> ExecutionRecord:
    record, call = settling.record, settling.call
    if call is None:
        return await _close_unknown(services, settling, "the tool or workspace is gone", ())
    leftovers = isinstance(services.adapters.get(call.tool.adapter), Recovering)
    cancelling = record.status is Status.CANCELLING
    error = ExecutionError(
        "the gateway stopped while this call was running"
        + (" (a cancel had been requested)" if cancelling else ""),
        code="interrupted",
    )
    before = [("state.checkpointed", settling.note)]
    if call.tool.side_effect not in WRITES:
        effect = SideEffectReport(False, False, "interrupted; no side effect")
        return await close_execution(services, record, Outcome.FAILED, error, effect, before=before)
    if not call.tool.reconcile:
        return await _close_unknown(services, settling, "no reconcile probe is declared", ())
    passed, evidence = await run_probes(services, call, call.tool.reconcile, "reconcile")
    if passed is None:
        return await _close_unknown(
            services, settling, "the reconcile probe could not read", evidence
        )
    if passed:
        effect = SideEffectReport(True, True, "recovered: the side effect is in place")
        return await close_execution(
            services, record, Outcome.SUCCEEDED, None, effect, evidence=evidence, before=before
        )
    if leftovers and not settling.why.local:
        why = (
            "its processes ran on another node, which this gateway can neither see nor stop: "
            "the probe finds nothing yet, but they may still be running"
        )
        return await _close_unknown(services, settling, why, evidence)
    effect = SideEffectReport(True, False, "recovered: the side effect did not happen")
    outcome = Outcome.CANCELLED if cancelling else Outcome.FAILED
    safe = with_retryable(error, True)  # the probe shows nothing happened: a retry is safe
    return await close_execution(
        services, record, outcome, safe, effect, evidence=evidence, before=before
    )


async def _close_unknown(
    services: Services, settling: Settling, why: str, evidence: Any
) -> ExecutionRecord:
    error = ExecutionError(
        f"the gateway stopped while this call was running and {why}: the side effect may "
        "have happened. A person must resolve it (toolgate executions resolve)",
        code="interrupted",
    )
    effect = SideEffectReport(True, False, "unknown: interrupted mid-flight")
    return await close_execution(
        services,
        settling.record,
        Outcome.UNKNOWN,
        error,
        effect,
        evidence=evidence,
        before=[("state.checkpointed", settling.note)],
    )


async def _rebuild(services: Services, record: ExecutionRecord) -> Call | None:
    """The call of ``record`` as far as normalisation (what probes need); ``None`` when it
    cannot be rebuilt."""
    try:
        return await rebuild(services, record)
    except StoreError:
        raise
    except ToolgateError as exc:
        log.warning("cannot rebuild %s for recovery: %s", record.id, exc)
        return None
    except Exception:
        log.exception("cannot rebuild %s for recovery", record.id)
        return None
