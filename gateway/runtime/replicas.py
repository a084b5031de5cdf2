"""This process as a replica: its row in the store and the heartbeat that renews its lease.

Every replica heartbeats every third of ``lock_lease``; an execution it runs carries its id
as ``owner``. A replica that stops heartbeating (killed, frozen, cut off from the store)
loses its lease ``lock_lease`` after its last beat, and recovery on any live replica then
settles what it owned (``gateway.runtime.recovery``). A clean stop gives the lease up at once.
"""

from __future__ import annotations

import logging

import anyio

from gateway.errors import ToolgateError
from gateway.instance import HOST, INSTANCE_ID, NODE, PID, STARTED_MS
from gateway.runtime.container import Runtime
from gateway.store.records import ReplicaRecord
from gateway.store.sql import now_ms

log = logging.getLogger("toolgate.replicas")
ME = ReplicaRecord(INSTANCE_ID, NODE, HOST, PID, STARTED_MS)
"""This process's row (its times are set by the store at each beat)."""
FORGET_AFTER_MS = 7 * 24 * 3600 * 1000
"""A replica whose lease ended this long ago, owning nothing unsettled, is forgotten."""


async def join(runtime: Runtime) -> None:
    """The first beat, before this replica runs or recovers anything."""
    await runtime.store.beat_replica(ME, runtime.settings.lock_lease)


async def heartbeat(runtime: Runtime) -> None:
    """Renew the lease every third of it, for as long as the process runs."""
    lease = runtime.settings.lock_lease
    while True:
        await anyio.sleep(lease / 3)
        try:
            await runtime.store.beat_replica(ME, lease)
        except ToolgateError as exc:
            log.warning("could not renew this replica's lease: %s", exc)


async def forget_gone(runtime: Runtime) -> None:
    """Drop the rows of replicas long gone that own nothing unsettled."""
    await runtime.store.prune_replicas(now_ms() - FORGET_AFTER_MS)


async def leave(runtime: Runtime) -> None:
    """A clean stop: end the lease now."""
    try:
        await runtime.store.leave_replica(ME.id)
    except ToolgateError as exc:
        log.warning("could not give up this replica's lease: %s", exc)
