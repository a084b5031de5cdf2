"""In-process workers: run queued (``Prefer: respond-async``) executions, keep recovering
executions that other, crashed replicas left behind, sign the audit trail's checkpoints,
and send the approval notifications of the outbox (``gateway.notifications.sender``)."""

from __future__ import annotations

import logging

import anyio
import anyio.abc

from gateway.audit.checkpoints import checkpoint_periodically
from gateway.errors import ToolgateError
from gateway.instance import INSTANCE_ID
from gateway.notifications.sender import send_notifications
from gateway.pipeline.runner import run_queued
from gateway.runtime import approvals
from gateway.runtime.container import Runtime
from gateway.runtime.recovery import recover, unresumed
from gateway.runtime.replicas import forget_gone
from gateway.store.records import ExecutionRecord

log = logging.getLogger("toolgate.worker")
IDLE_POLL = 1.0
"""Seconds between looks at the queue when nothing woke the worker (other replicas)."""


async def run_workers(runtime: Runtime) -> None:
    claimed: set[str] = set()
    async with anyio.create_task_group() as tg:
        for _ in range(runtime.settings.workers):
            tg.start_soon(_work, runtime, claimed)
        tg.start_soon(_recover_periodically, runtime, tg)
        tg.start_soon(send_notifications, runtime.notifications)
        if runtime.audit_signer is not None:
            interval = runtime.settings.audit.checkpoint_interval
            tg.start_soon(checkpoint_periodically, runtime.store, runtime.audit_signer, interval)


async def _work(runtime: Runtime, claimed: set[str]) -> None:
    """One worker: claim the next queued call, run it, again. ``claimed``: the calls the
    workers of this process run now (shared by them)."""
    running = runtime.admission.executions
    while True:
        try:
            record = await _claim_fairly(runtime)
        except ToolgateError as exc:
            log.warning("cannot read the queue: %s", exc)
            record = None
        if record is None:
            await runtime.queue_signal.wait(IDLE_POLL)
            continue
        if record.id in claimed:
            _claimed_twice(record)
            continue
        claimed.add(record.id)
        runtime.active.add(record.id)  # before any await: recovery must not requeue it
        try:
            with running.hold(record.principal, force=True):  # admitted when it was queued
                await run_queued(runtime, record)
        except Exception:
            log.exception("queued execution %s failed; recovery will settle it", record.id)
        finally:
            runtime.active.discard(record.id)
            claimed.discard(record.id)


def _claimed_twice(record: ExecutionRecord) -> None:
    """Two workers here claimed one call: recovery queued it again between the claims, before
    it started (another replica took this process for gone, its lease run out under a
    pause; or this process's own pass read the first claim before its worker had marked the
    call running, and took it for left behind). Both claims carry this process's id as
    owner, so the fence on ``tool.started`` (``pipeline/execute.py``) cannot tell their flows
    apart: both would run it. The worker that marked it first goes on with it (it starts it
    while the call is still this process's; else another replica's worker has it); should
    that flow end without starting it, recovery finds the call left behind here and queues
    it again."""
    log.warning("%s was claimed twice here (queued again meanwhile): run once", record.id)


async def _claim_fairly(runtime: Runtime) -> ExecutionRecord | None:
    """The oldest queued call of a principal running nothing here, else of one below its
    share (``max_executions_per_principal``): one principal's backlog cannot hold every
    worker while another's call waits (docs/security.md#bounded-load)."""
    running = runtime.admission.executions
    busy, full = running.holders(), running.full()
    record = await runtime.store.claim_queued(INSTANCE_ID, avoid=busy)
    if record is None and busy - full:
        record = await runtime.store.claim_queued(INSTANCE_ID, avoid=full)
    return record


async def _recover_periodically(runtime: Runtime, tg: anyio.abc.TaskGroup) -> None:
    """A recovery pass every half lease: another replica's expired lease is seen within
    ``lock_lease / 2`` of its expiry (at least a second apart). Approved calls whose replica
    stopped before resuming them are resumed here, beside the workers."""
    interval = max(runtime.settings.lock_lease / 2, 1.0)
    while True:
        await anyio.sleep(interval)
        try:
            await recover(runtime)
            for approval in await unresumed(runtime):
                log.warning("resuming %s: approved, never resumed", approval.execution_id)
                tg.start_soon(approvals.resume, runtime, approval)
            await forget_gone(runtime)
        except ToolgateError as exc:
            log.warning("recovery pass failed: %s", exc)
