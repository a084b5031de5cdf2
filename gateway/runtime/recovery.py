"""Crash recovery: settle every execution whose owner died while it ran.

On start (and periodically, for other replicas' crashes) the gateway finds executions left
``running`` or ``cancelling`` whose owner process is gone (same host) or whose heartbeat is
stale (another host). For each it:

- never re-runs a side effect: one that never reached ``tool.started`` is queued again
  (nothing was attempted, so running it is safe); one that started is settled;
- stops what the adapter left behind when it can prove it is its own (the adapter's
  ``recover(state)`` gets each ``state.checkpointed`` adapter state, e.g. pid + start time);
- asks the tool's reconcile probes whether the side effect is in place, and commits
  ``succeeded``, ``failed`` or, when nobody can tell, ``unknown``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio

from gateway.adapters.base import Recovering, SideEffectReport
from gateway.errors import ExecutionError, StoreError, ToolgateError
from gateway.events.model import make_event
from gateway.instance import INSTANCE_ID, owner_is_gone
from gateway.pipeline.probes import run_probes
from gateway.pipeline.reconcile import WRITES, with_retryable
from gateway.pipeline.records import Call
from gateway.pipeline.runner import rebuild
from gateway.pipeline.services import Services
from gateway.runtime.closing import close_execution
from gateway.store.records import ExecutionRecord
from gateway.types import Outcome, Status

log = logging.getLogger("toolgate.recovery")
STALE_LEASES = 3
"""A heartbeat older than this many lock leases means the owner on another host is gone."""


def abandoned(services: Services, record: ExecutionRecord) -> bool:
    if record.id in services.active:
        return False
    if record.owner == INSTANCE_ID:
        return True  # ours, yet no flow runs it: it failed mid-way and was left behind
    gone = owner_is_gone(record.owner)
    if gone is not None:
        return gone
    stale_ms = STALE_LEASES * services.settings.lock_lease * 1000
    return time.time() * 1000 - record.updated_ms > stale_ms


RECOVERY_CONCURRENCY = 16
"""Executions settled at once: stopping process trees and probing wait on I/O."""


async def recover(services: Services) -> list[ExecutionRecord]:
    """Settle every abandoned execution, several at a time; returns their new states."""
    settled: list[ExecutionRecord] = []
    limiter = anyio.CapacityLimiter(RECOVERY_CONCURRENCY)

    async def one(record: ExecutionRecord) -> None:
        async with limiter:
            try:
                settled.append(await recover_one(services, record))
            except ToolgateError as exc:
                log.warning("could not recover %s yet: %s", record.id, exc)
            except Exception:  # one execution's failure must not stop the others
                log.exception("could not recover %s yet", record.id)

    candidates = await services.store.unfinished([Status.RUNNING, Status.CANCELLING])
    async with anyio.create_task_group() as tg:
        for record in candidates:
            if abandoned(services, record):
                tg.start_soon(one, record)
    return settled


async def recover_one(services: Services, record: ExecutionRecord) -> ExecutionRecord:
    """Settle (or requeue) one execution a crash left, on the newest generation of the
    runtime (held until it is settled); counted by what was done."""
    with services.lease() as services:
        settled = await _recover_one(services, record)
    if (metrics := services.telemetry.metrics) is not None:
        metrics.recovered("requeued" if not settled.terminal else f"settled_{settled.outcome}")
    return settled


async def _recover_one(services: Services, record: ExecutionRecord) -> ExecutionRecord:
    events = await services.store.events(record.id)
    started = any(e.type == "tool.started" for e in events)
    if not started:
        note = make_event(
            record.id, 0, "state.checkpointed", {"status": "queued", "by": "recovery"}
        )
        moved = await services.store.set_status(
            record.id, [Status.RUNNING, Status.CANCELLING], Status.QUEUED, [note]
        )
        if moved:
            services.wake_workers()
            log.info("requeued %s: interrupted before its side effect began", record.id)
        return await services.store.get_execution(record.id) or record
    states = [
        e.data["adapter"] for e in events if e.type == "state.checkpointed" and "adapter" in e.data
    ]
    if not states:  # crashed between starting and checkpointing: find it by its marker
        began = next(e.at_ms for e in events if e.type == "tool.started")
        states = [{"marker": record.id, "not_before": began / 1000 - 1}]
    try:
        return await _settle_started(services, record, states)
    except StoreError:
        raise  # nothing can be recorded now: the next pass tries again
    except Exception:  # no exception leaves a started execution unsettled
        log.exception("recovering %s failed; settling it unknown", record.id)
        return await _close_unknown(services, record, "recovering it failed", ())


async def _settle_started(
    services: Services, record: ExecutionRecord, states: list[Any]
) -> ExecutionRecord:
    call = await _rebuild(services, record)
    if call is None:
        return await _close_unknown(services, record, "the tool or workspace is gone", ())
    await _stop_leftovers(services, call, states)
    cancelling = record.status is Status.CANCELLING
    error = ExecutionError(
        "the gateway stopped while this call was running"
        + (" (a cancel had been requested)" if cancelling else ""),
        code="interrupted",
    )
    if call.tool.side_effect not in WRITES:
        return await close_execution(
            services,
            record,
            Outcome.FAILED,
            error,
            SideEffectReport(False, False, "interrupted; no side effect"),
        )
    if not call.tool.reconcile:
        return await _close_unknown(services, record, "no reconcile probe is declared", ())
    passed, evidence = await run_probes(services, call, call.tool.reconcile, "reconcile")
    if passed is None:
        return await _close_unknown(
            services, record, "the reconcile probe could not read", evidence
        )
    if passed:
        effect = SideEffectReport(True, True, "recovered: the side effect is in place")
        return await close_execution(
            services, record, Outcome.SUCCEEDED, None, effect, evidence=evidence
        )
    effect = SideEffectReport(True, False, "recovered: the side effect did not happen")
    outcome = Outcome.CANCELLED if cancelling else Outcome.FAILED
    safe = with_retryable(error, True)  # the probe shows nothing happened: a retry is safe
    return await close_execution(services, record, outcome, safe, effect, evidence=evidence)


async def _close_unknown(
    services: Services, record: ExecutionRecord, why: str, evidence: Any
) -> ExecutionRecord:
    error = ExecutionError(
        f"the gateway stopped while this call was running and {why}: the side effect may "
        "have happened. A person must resolve it (toolgate executions resolve)",
        code="interrupted",
    )
    effect = SideEffectReport(True, False, "unknown: interrupted mid-flight")
    return await close_execution(
        services, record, Outcome.UNKNOWN, error, effect, evidence=evidence
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


async def _stop_leftovers(services: Services, call: Call, states: list[Any]) -> None:
    adapter = services.adapters.get(call.tool.adapter)
    if not isinstance(adapter, Recovering):
        return
    for state in states:
        try:
            await adapter.recover(state)
        except ToolgateError as exc:
            log.warning("could not stop what %s left running: %s", call.execution_id, exc)
        except Exception:
            log.exception("could not stop what %s left running", call.execution_id)
