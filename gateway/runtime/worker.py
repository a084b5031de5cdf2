"""In-process workers: run queued (``Prefer: respond-async``) executions, keep recovering
executions that other, crashed replicas left behind, and sign the audit trail's checkpoints."""

from __future__ import annotations

import logging

import anyio

from gateway.audit.checkpoints import checkpoint_periodically
from gateway.errors import ToolgateError
from gateway.instance import INSTANCE_ID
from gateway.pipeline.runner import run_queued
from gateway.runtime.container import Runtime
from gateway.runtime.recovery import recover

log = logging.getLogger("toolgate.worker")
IDLE_POLL = 1.0
"""Seconds between looks at the queue when nothing woke the worker (other replicas)."""


async def run_workers(runtime: Runtime) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(runtime.settings.workers):
            tg.start_soon(_work, runtime)
        tg.start_soon(_recover_periodically, runtime)
        if runtime.audit_signer is not None:
            interval = runtime.settings.audit.checkpoint_interval
            tg.start_soon(checkpoint_periodically, runtime.store, runtime.audit_signer, interval)


async def _work(runtime: Runtime) -> None:
    while True:
        try:
            record = await runtime.store.claim_queued(INSTANCE_ID)
        except ToolgateError as exc:
            log.warning("cannot read the queue: %s", exc)
            record = None
        if record is None:
            await runtime.queue_signal.wait(IDLE_POLL)
            continue
        runtime.active.add(record.id)  # before any await: recovery must not requeue it
        try:
            await run_queued(runtime, record)
        except Exception:
            log.exception("queued execution %s failed; recovery will settle it", record.id)
        finally:
            runtime.active.discard(record.id)


async def _recover_periodically(runtime: Runtime) -> None:
    interval = max(runtime.settings.lock_lease, 1.0)
    while True:
        await anyio.sleep(interval)
        try:
            await recover(runtime)
        except ToolgateError as exc:
            log.warning("recovery pass failed: %s", exc)
