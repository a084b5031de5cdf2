"""Stage 7's watchers (output flushes, the store's cancel, the deadline), which start only
once a call has run for a tick, and the shortcuts of the records that flow through it."""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from gateway.adapters.base import AdapterCall, AdapterOutcome, SideEffectReport
from gateway.declarations.catalogue import Catalogue
from gateway.events.model import make_event
from gateway.pipeline import execute
from gateway.pipeline.records import _REQUEST_FIELDS, Requested, Trail
from gateway.pipeline.runner import run_call
from gateway.pipeline.services import Services
from gateway.store.store import Store
from gateway.types import Outcome, Status
from tests.helpers import until
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    ok,
    read_ok,
    request,
    sha_probe,
    slow,
)

pytestmark = pytest.mark.anyio


async def test_a_fast_call_starts_no_watcher_task(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    tasks: list[int] = []

    async def counting(call: AdapterCall) -> AdapterOutcome:
        tasks.append(len(asyncio.all_tasks()))
        return await read_ok(call)

    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(counting), FunctionPolicy(allow_all)
    )
    before = len(asyncio.all_tasks())
    record = await run_call(services, request("fs.read_file", arguments={"path": "a.txt"}))
    assert record.outcome == "succeeded"
    assert tasks == [before]


async def test_output_of_a_long_call_is_flushed_while_it_runs_and_at_the_end(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    seen_while_running: list[list[str]] = []

    async def talky(call: AdapterCall) -> AdapterOutcome:
        call.emit_output("stdout", "first\n")

        async def flushed() -> list[str]:
            events = await store.events(call.execution_id)
            return [e.data["text"] for e in events if e.type == "tool.output"]

        seen_while_running.append(await until(flushed, "the first output to be flushed"))
        call.emit_output("stdout", "second\n")
        return await ok(call)

    written = sha_probe(hashlib.sha256(b"hi").hexdigest())
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(talky, written), FunctionPolicy(allow_all)
    )
    record = await run_call(services, request())
    assert record.outcome == "succeeded"
    assert seen_while_running == [["first\n"]]
    events = await store.events(record.id)
    assert [e.data["text"] for e in events if e.type == "tool.output"] == ["first\n", "second\n"]
    assert [e.seq for e in events] == list(range(len(events)))


async def test_a_cancel_seen_only_in_the_store_reaches_the_adapter(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    """Another replica's API marks the execution cancelling; no local signal."""

    async def polite(call: AdapterCall) -> AdapterOutcome:
        note = make_event(call.execution_id, 0, "state.checkpointed", {"status": "cancelling"})
        assert await store.set_status(
            call.execution_id, [Status.RUNNING], Status.CANCELLING, [note]
        )
        with anyio.fail_after(5):
            await call.cancelled.wait()
        return AdapterOutcome(Outcome.CANCELLED, None, SideEffectReport(False, False, "stopped"))

    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(polite), FunctionPolicy(allow_all)
    )
    start = time.monotonic()
    record = await run_call(services, request())
    assert record.outcome == "cancelled"
    assert time.monotonic() - start < execute.WATCH_INTERVAL + 1.5


async def test_the_deadline_and_an_adapter_timeout_are_both_timeouts(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    async def raises(call: AdapterCall) -> AdapterOutcome:
        raise TimeoutError("the library gave up")

    for fn in (slow, raises):
        services = make_services(
            tmp_path, store, catalogue, FunctionAdapter(fn), FunctionPolicy(allow_all)
        )
        deadline = int(time.time() * 1000) + 300
        req = request("fs.read_file", arguments={"path": "a.txt"}, call_id=fn.__name__)
        result = (await run_call(services, replace(req, deadline_ms=deadline))).result
        assert result is not None and result["outcome"] == "failed"
        assert result["error"]["type"] == "timeout" and result["error"]["retryable"] is True


async def test_a_cancel_signal_after_the_call_ended_is_refused(services: Services) -> None:
    record = await run_call(services, request())
    assert services.cancellations.signal(record.id) is False


def test_a_trail_emits_into_a_copy_and_stays_frozen() -> None:
    start = Requested.start(request(), respond_async=True)
    trail = start.trail
    emitted = trail.emit("tool.resolved", name="x")
    assert (trail.seq, len(trail.events), start.ticket.respond_async) == (1, 1, True)
    assert emitted.seq == 2 and emitted.execution_id == start.ticket.execution_id
    assert [e.type for e in emitted.events] == ["tool.requested", "tool.resolved"]
    assert [e.seq for e in emitted.events] == [0, 1]
    assert emitted.drained() == Trail(trail.execution_id, (), 2)
    with pytest.raises(AttributeError):
        trail.seq = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        start.trail = emitted  # type: ignore[misc]


def test_request_to_json_has_every_field_but_the_body() -> None:
    req = request(expected_state={"sha256": "x"}, idempotency_key="k")
    data = req.to_json()
    assert list(data) == list(_REQUEST_FIELDS)
    as_json = {name: getattr(req, name) for name in _REQUEST_FIELDS}
    assert data == {**as_json, "roles": list(req.roles)}
    assert type(req).from_json(data) == replace(req, body=data)


async def _cancel_soon(services: Services, store: Store) -> None:
    """Cancel the first execution that shows up running, the way the API does."""
    from gateway.runtime import cancellation

    for _ in range(200):
        running = await store.unfinished([Status.RUNNING])
        started = [
            r for r in running if any(e.type == "tool.started" for e in await store.events(r.id))
        ]
        if started:
            await cancellation.cancel(services, started[0], "bob")
            return
        await anyio.sleep(0.01)
    raise AssertionError("nothing started")


async def test_cancel_reaches_a_cooperative_adapter(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    async def polite(call: AdapterCall) -> AdapterOutcome:
        await call.cancelled.wait()
        return AdapterOutcome(Outcome.CANCELLED, None, SideEffectReport(False, False, "stopped"))

    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(polite), FunctionPolicy(allow_all)
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_soon, services, store)
        record = await run_call(services, request())
    assert record.outcome == "cancelled"
    types = [e.type for e in await store.events(record.id)]
    assert "state.checkpointed" in types and types[-1] == "tool.completed"


async def test_cancel_cuts_off_a_deaf_adapter_then_reconciles(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    async def deaf(call: AdapterCall) -> AdapterOutcome:
        await anyio.sleep(30)
        raise AssertionError("not reached")

    # The reconcile probe finds the content absent: the cut-off call is cancelled, not failed.
    services = make_services(
        tmp_path,
        store,
        catalogue,
        FunctionAdapter(deaf, sha_probe(None)),
        FunctionPolicy(allow_all),
    )
    services = replace(
        services, settings=services.settings.model_copy(update={"cancel_grace": 0.1})
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_soon, services, store)
        record = await run_call(services, request())
    result = record.result
    assert result is not None and result["outcome"] == "cancelled"
    assert result["error"]["type"] == "cancelled"
    assert result["side_effect"]["summary"] == "reconciled: the side effect did not happen"


async def test_no_side_effect_starts_once_the_deadline_has_passed(
    tmp_path: Path, store: Store, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 §5: a call that passed validation with 1 ms left started its adapter and
    ended ``timeout`` with something attempted. The clock the last check reads is moved past
    the deadline once the locks are held: deterministic, no race with the real clock."""
    import time

    from gateway.pipeline import execute

    adapter = FunctionAdapter(ok, sha_probe(hashlib.sha256(b"hi").hexdigest()))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    deadline = int(time.time() * 1000) + 60_000
    # raising=False: on the code before the fix the seam did not exist, and the test fails
    # on its assertions, not on the patch.
    monkeypatch.setattr(execute, "_now", lambda: deadline / 1000 + 0.001, raising=False)
    record = await run_call(services, request(deadline_ms=deadline, idempotency_key="k"))
    result = record.result
    assert record.status is Status.COMPLETED and result is not None
    assert result["outcome"] == "failed" and result["error"]["type"] == "deadline_exceeded"
    assert result["error"]["phase"] == "execute" and result["error"]["retryable"] is True
    assert result["side_effect"]["attempted"] is False
    assert adapter.calls == []
    assert await store.unfinished([Status.RUNNING]) == []
    # With less than START_FLOOR left it does not start either; with more, it runs.
    floor = getattr(execute, "START_FLOOR", 0.01)
    monkeypatch.setattr(execute, "_now", lambda: deadline / 1000 - floor / 2, raising=False)
    record = await run_call(services, request(call_id="c2", deadline_ms=deadline))
    assert record.outcome == "failed" and adapter.calls == []
    monkeypatch.setattr(execute, "_now", time.time, raising=False)
    record = await run_call(services, request(call_id="c3", deadline_ms=deadline))
    assert record.outcome == "succeeded" and len(adapter.calls) == 1


class _Immediate(FunctionAdapter):
    """An adapter that finishes some calls at once (``answer``), the rest as usual."""

    def __init__(self, answer: object) -> None:
        super().__init__(read_ok)
        self.answer, self.awaited = answer, 0

    async def execute(self, call: AdapterCall) -> AdapterOutcome:
        self.awaited += 1
        return await super().execute(call)

    def execute_now(self, call: AdapterCall) -> AdapterOutcome | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


async def test_an_immediate_outcome_is_the_calls_and_execute_is_not_awaited(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    data = {"path": "a.txt", "content": "once", "encoding": "utf-8", "size": 4, "sha256": "1" * 64}
    adapter = _Immediate(AdapterOutcome(Outcome.SUCCEEDED, data=data))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    record = await run_call(services, request("fs.read_file", arguments={"path": "a.txt"}))
    assert record.result is not None
    assert (record.outcome, record.result["data"], adapter.awaited) == ("succeeded", data, 0)


async def test_without_an_immediate_outcome_the_call_takes_the_usual_path(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter = _Immediate(None)
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    record = await run_call(services, request("fs.read_file", arguments={"path": "a.txt"}))
    assert (record.outcome, adapter.awaited) == ("succeeded", 1)


async def test_an_immediate_crash_is_translated_like_one_of_execute(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    adapter = _Immediate(RuntimeError("boom"))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    record = await run_call(services, request("fs.read_file", arguments={"path": "a.txt"}))
    assert record.outcome == "failed"
    assert record.result is not None
    assert "adapter_crashed" in str(record.result["error"])
