"""In-process workers: run queued (``Prefer: respond-async``) executions, and keep
recovering executions that other, crashed replicas left behind."""

from __future__ import annotations

import logging

import anyio

from gateway.errors import ToolgateError
from gateway.instance import INSTANCE_ID
from gateway.pipeline.runner import run_queued
from gateway.pipeline.services import Services
from gateway.recovery import recover

log = logging.getLogger("toolgate.worker")
IDLE_POLL = 1.0
"""Seconds between looks at the queue when nothing woke the worker (other replicas)."""


async def run_workers(services: Services) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(services.settings.workers):
            tg.start_soon(_work, services)
        tg.start_soon(_recover_periodically, services)


async def _work(services: Services) -> None:
    while True:
        try:
            record = await services.store.claim_queued(INSTANCE_ID)
        except ToolgateError as exc:
            log.warning("cannot read the queue: %s", exc)
            record = None
        if record is None:
            await services.queue_signal.wait(IDLE_POLL)
            continue
        services.active.add(record.id)  # before any await: recovery must not requeue it
        try:
            await run_queued(services, record)
        except Exception:
            log.exception("queued execution %s failed; recovery will settle it", record.id)
        finally:
            services.active.discard(record.id)


async def _recover_periodically(services: Services) -> None:
    interval = max(services.settings.lock_lease, 1.0)
    while True:
        await anyio.sleep(interval)
        try:
            await recover(services)
        except ToolgateError as exc:
            log.warning("recovery pass failed: %s", exc)
