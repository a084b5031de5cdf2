"""Stage lock (gateway/pipeline/lock.py): declared locks, waited for, cancellable."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.pipeline.runner import run_call
from gateway.pipeline.services import Services
from gateway.store.records import ExecutionRecord
from gateway.store.store import Store
from gateway.types import Status
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    ok,
    prepared,
    request,
)

pytestmark = pytest.mark.anyio


async def test_lock_held_elsewhere_times_out_retryable(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:

    from gateway.store.records import LockRequest
    from gateway.types import LockMode

    await store.try_acquire(
        "ex_other", "other-call", [LockRequest("ws:demo:file:a.txt", LockMode.EXCLUSIVE)], 30
    )
    adapter = FunctionAdapter(ok)
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    result = (await run_call(services, request(deadline_ms=int(time.time() * 1000) + 300))).result
    assert result is not None and result["error"]["type"] == "lock_timeout"
    assert result["error"]["retryable"] is True and "other-call" in result["error"]["message"]
    assert adapter.calls == []


async def test_cancel_while_waiting_for_locks_is_not_lost(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:

    from gateway.runtime import cancellation
    from gateway.store.records import LockRequest
    from gateway.types import LockMode

    key = [LockRequest("ws:demo:file:a.txt", LockMode.EXCLUSIVE)]
    await store.try_acquire("ex_holder", "holder", key, 30)
    adapter = FunctionAdapter(ok)
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))

    async def cancel_then_release() -> None:
        for _ in range(300):
            waiting = await store.unfinished([Status.RUNNING])
            if waiting:
                await cancellation.cancel(services, waiting[0], "bob")
                await store.release_locks("ex_holder")
                return
            await anyio.sleep(0.01)
        raise AssertionError("the call never reserved")

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_then_release)
        record = await run_call(services, request(deadline_ms=int(time.time() * 1000) + 5000))
    assert record.outcome == "cancelled"
    assert adapter.calls == []
    assert "tool.started" not in [e.type for e in await store.events(record.id)]


async def test_a_cancel_answers_the_call_as_marked_however_late_a_read_comes(
    tmp_path: Path, store: Store, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel of a running call answers ``cancelling`` (202). It read the call back in a
    read of its own after the mark; the waiting flow, seeing the mark at its next poll of
    the lock, could end the call first, and the answer was then ``completed`` (1 in some
    tens of runs of tests/server/test_async_cancel.py). The read here waits for that end."""
    from gateway.runtime import cancellation
    from gateway.store.records import LockRequest
    from gateway.types import LockMode
    from tests.helpers import until

    key = [LockRequest("ws:demo:file:a.txt", LockMode.EXCLUSIVE)]
    await store.try_acquire("ex_holder", "holder", key, 30)
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    read, cancelling = store.get_execution, contextvars.ContextVar("cancelling", default=False)

    async def late_read(execution_id: str) -> ExecutionRecord | None:
        if cancelling.get():  # the cancel's read comes once the flow has ended the call
            await until(lambda: _ended(read, execution_id), "the call ended")
        return await read(execution_id)

    monkeypatch.setattr(store, "get_execution", late_read)
    answers = []

    async def cancel() -> None:
        waiting = await until(lambda: store.unfinished([Status.RUNNING]), "the call running")
        cancelling.set(True)
        answers.append(await cancellation.cancel(services, waiting[0], "bob"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel)
        record = await run_call(services, request(deadline_ms=int(time.time() * 1000) + 5000))
    assert (answers[0].status, record.outcome) == ("cancelling", "cancelled")


async def _ended(read: Callable[[str], Awaitable[ExecutionRecord | None]], id_: str) -> bool:
    found = await read(id_)
    return found is not None and found.terminal


async def test_the_lock_keys_are_rendered_sorted_and_exclusive_wins(services: Services) -> None:
    from gateway.pipeline import lock
    from gateway.pipeline.records import Locked, Reserved

    state = await prepared(services, request())
    [wanted] = lock.lock_requests(state.call)
    assert wanted.key == "ws:demo:file:a.txt" and wanted.mode.value == "exclusive"
    locked = await lock.run(services, Reserved(state.call, None, state.trail))
    assert isinstance(locked, Locked) and list(locked.fencing) == [wanted.key]
    assert locked.trail.events[-1].type == "lock.acquired"


async def test_a_lock_wait_and_its_timeout_are_counted(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    from dataclasses import replace

    from gateway.observability.metrics import Metrics
    from gateway.observability.telemetry import Telemetry
    from gateway.store.records import LockRequest
    from gateway.types import LockMode

    await store.try_acquire(
        "ex_other", "other-call", [LockRequest("ws:demo:file:a.txt", LockMode.EXCLUSIVE)], 30
    )
    metrics = Metrics()
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    services = replace(services, telemetry=Telemetry(metrics=metrics))  # type: ignore[type-var]
    await run_call(services, request(deadline_ms=int(time.time() * 1000) + 200))
    await store.release_locks("ex_other")
    await run_call(services, request(call_id="c2"))  # free now: no wait
    assert metrics.lock_waits.values == {(): 1}
    assert metrics.lock_timeouts.values == {(): 1}
    waited = metrics.lock_wait_seconds.child()
    assert sum(waited.counts) == 1 and 0.05 < waited.total < 5
    assert metrics.executions.values[("fs.write_file", "failed", "execute")] == 1
    assert sum(metrics.executions.values.values()) == 2


async def test_a_call_nothing_can_cancel_waits_for_its_lock_and_gets_it(
    services: Services, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ephemeral call (no execution to cancel: it has no cancel signal) polls the busy
    lock until its holder lets go."""
    from gateway.pipeline import lock
    from gateway.pipeline.records import Locked, Reserved
    from gateway.store.records import LockBusy, LockRequest
    from gateway.types import LockMode

    state = await prepared(services, request())
    key = [LockRequest("ws:demo:file:a.txt", LockMode.EXCLUSIVE)]
    await store.try_acquire("ex_holder", "holder", key, 30)
    acquire, busy = store.try_acquire, anyio.Event()

    async def watched(*args: Any) -> dict[str, int] | LockBusy:
        got = await acquire(*args)
        if isinstance(got, LockBusy):
            busy.set()
        return got

    monkeypatch.setattr(store, "try_acquire", watched)

    async def release_later() -> None:  # once the call found the lock busy, not before
        await busy.wait()
        await anyio.sleep(0.1)  # and polls on: the call waited at least this long
        await store.release_locks("ex_holder")

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(release_later)
        locked = await lock.run(services, Reserved(state.call, None, state.trail))
        tg.cancel_scope.cancel()  # a call that never found it busy: fail below, not hang
    assert isinstance(locked, Locked) and list(locked.fencing) == [key[0].key]
    assert time.monotonic() - start >= 0.1
    assert busy.is_set()
