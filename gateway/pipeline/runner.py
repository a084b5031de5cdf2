"""The pipeline: the ordered list of stages, and the loop that runs a call through them.

Each stage is ``async def run(services, flow) -> Flow``. A stage ends a call early by
raising a ``CallError`` (the call becomes a failed execution in that error's phase) or by
setting ``flow.existing`` (the call resolves to an execution that already exists).
``RequestError`` (400/409/422) propagates: such a request never becomes an execution.
Anything else that escapes a stage is settled by the one catch-all below (``_escaped``):
``failed`` before the adapter was called, reconciled or ``unknown`` after a write's adapter
was; only ``StoreError`` (nothing can be recorded) still propagates, to recovery.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from gateway import jsontext
from gateway.adapters.base import SideEffectReport
from gateway.errors import (
    CallError,
    ExecutionError,
    NotFound,
    RequestError,
    StoreError,
    ToolgateError,
)
from gateway.pipeline import (
    authorize,
    commit,
    execute,
    locking,
    normalise,
    reserve,
    resolve,
    settle,
    validate,
    verify,
)
from gateway.pipeline.records import Flow, ToolExecutionRequest, ToolResult
from gateway.pipeline.services import Services
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import Outcome, Phase

log = logging.getLogger("toolgate.pipeline")
StageFn = Callable[[Services, Flow], Awaitable[Flow]]


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    run: StageFn
    always: bool = False
    """Runs even when an earlier stage already produced the result (it acts on results)."""


STAGES: tuple[Stage, ...] = (
    Stage("resolve", resolve.run),
    Stage("normalise", normalise.run),
    Stage("validate", validate.run),
    Stage("policy", authorize.run),
    Stage("reserve", reserve.run),
    Stage("lock", locking.run),
    Stage("execute", execute.run),
    Stage("result", settle.run),
    Stage("verify", verify.run, always=True),
    Stage("commit", commit.run, always=True),
)


async def run_call(
    services: Services,
    request: ToolExecutionRequest,
    stages: tuple[Stage, ...] = STAGES,
    respond_async: bool = False,
) -> ExecutionRecord:
    """Run one call through ``stages``; returns the execution as the store now holds it.

    With ``respond_async`` the call stops once reserved (status ``queued``) and a worker
    runs the rest (``run_queued``)."""
    flow = Flow.start(request, respond_async=respond_async)
    return await run_flow(services, flow, stages)


async def run_queued(services: Services, record: ExecutionRecord) -> ExecutionRecord:
    """Run a queued execution this process has claimed; validation and policy run again."""
    events = await services.store.events(record.id)
    flow = Flow.dequeued(record, events[-1].seq + 1 if events else 0)
    return await run_flow(services, flow)


async def resume_call(services: Services, approval: ApprovalRecord) -> ExecutionRecord:
    """Continue the execution parked for ``approval`` (now approved): validation and
    policy run again, since the world may have changed while it waited."""
    record = await services.store.get_execution(approval.execution_id)
    if record is None:
        raise NotFound(f"execution {approval.execution_id} of approval {approval.id} is gone")
    events = await services.store.events(record.id)
    flow = Flow.resume(record, approval, events[-1].seq + 1 if events else 0)
    return await run_flow(services, flow)


async def run_flow(
    services: Services, flow: Flow, stages: tuple[Stage, ...] = STAGES
) -> ExecutionRecord:
    """Run ``flow`` through ``stages``."""
    services.active.add(flow.execution_id)
    try:
        for stage in stages:
            if flow.existing is not None:
                break
            if flow.result is not None and not stage.always:
                continue
            flow = await _run_stage(stage, services, flow)
    finally:
        services.active.discard(flow.execution_id)
        if flow.fencing and (flow.record is None or not flow.record.terminal):
            await _release(services, flow)
    if flow.existing is not None:
        return flow.existing
    assert flow.record is not None
    return flow.record


FAULT_POINTS: dict[str, tuple[str | None, str | None]] = {
    "reserve": (None, "after_reserve"),
    "verify": ("during_verify", None),
    "commit": ("before_commit", "after_commit"),
}
"""Stage → (fault point before it, fault point after it); execute has its own two."""


async def _run_stage(stage: Stage, services: Services, flow: Flow) -> Flow:
    before, after = FAULT_POINTS.get(stage.name, (None, None))
    try:
        if before:
            await services.faults.hit(before)
        flow = await stage.run(services, flow)
        if after and (flow.record is not None or stage.name == "commit"):
            await services.faults.hit(after)
        return flow
    except CallError as exc:
        if flow.started_ms is not None and stage.name != "execute":
            return await _escaped(stage, services, flow, exc)  # too late to end it "failed"
        return _failed(flow, exc)
    except (RequestError, StoreError):
        raise  # 4xx by design; or the store is down and nothing can be recorded now
    except Exception as exc:
        return await _escaped(stage, services, flow, exc)


# -- the catch-all ----------------------------------------------------------------------------
#
# Whatever escapes a stage (a bug, an injected fault, a foreign exception no edge
# translated) ends the call here, once, with a terminal and truthful outcome that is then
# committed like any other: ``failed`` with nothing attempted while the side effect cannot
# have begun; after it may have begun, what the reconcile probes show, else ``unknown``.
# The caller gets a result (200), never the exception; the traceback goes to the log.


async def _escaped(stage: Stage, services: Services, flow: Flow, exc: Exception) -> Flow:
    adapter_called = flow.started_ms is not None
    if isinstance(exc, execute.Escaped):
        flow, adapter_called = exc.flow, exc.adapter_called
    cause = exc.__cause__ if isinstance(exc, execute.Escaped) else exc
    log.error(
        "stage %s failed for execution %s",
        stage.name,
        flow.execution_id,
        exc_info=(type(cause), cause, cause.__traceback__) if cause else None,
    )
    tool = flow.tool
    if not adapter_called or tool is None or tool.side_effect not in settle.WRITES:
        nothing = "nothing was executed" if not adapter_called else "it changed nothing"
        flow = _failed(flow, _internal(stage, flow, nothing))
    else:
        flow = await _uncertain(stage, services, flow)
    if stage.name == "commit":
        return await _commit_anyway(services, flow)
    return flow


def _internal(stage: Stage, flow: Flow, what: str) -> ExecutionError:
    return ExecutionError(
        f"the gateway failed in stage {stage.name}; {what} "
        f"(see the gateway log for execution {flow.execution_id})",
        code="internal_error",
    )


async def _uncertain(stage: Stage, services: Services, flow: Flow) -> Flow:
    """A write whose side effect may have begun: reconciled by its probes when the
    failure came before the result was settled, else ``unknown``."""
    error = _internal(stage, flow, "the side effect may have happened")
    base = flow.result or ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(flow.tool.version) if flow.tool else None,
        outcome=Outcome.UNKNOWN,
    )
    if stage.name == "execute":
        try:
            return await settle.reconcile(services, flow, base, error, Outcome.FAILED)
        except Exception:
            log.exception("reconciling execution %s failed", flow.execution_id)
    unknown = replace(
        base,
        outcome=Outcome.UNKNOWN,
        error=error,
        side_effect=SideEffectReport(True, False, "the side effect may have happened"),
    )
    return flow.but(result=unknown)


async def _commit_anyway(services: Services, flow: Flow) -> Flow:
    """The commit stage itself failed (not the store): commit a bare result instead, with
    nothing of the one that could not be recorded but its outcome's truth."""
    assert flow.result is not None
    bare = replace(flow.result, data=None, evidence=(), truncated=False)
    flow = flow.but(result=bare, events=tuple(e for e in flow.events if _plain(e.data)))
    return await commit.run(services, flow)


def _plain(data: object) -> bool:
    """Whether event data can be stored (the commit that failed may have failed on it)."""
    try:
        jsontext.stored(data)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return True


def _failed(flow: Flow, error: ToolgateError) -> Flow:
    if error.phase in (Phase.RESOLVE, Phase.VALIDATE):
        flow = flow.emit("tool.validation_failed", **error.to_json())
    result = ToolResult(
        call_id=flow.request.call_id,
        tool_version=str(flow.tool.version) if flow.tool else None,
        outcome=Outcome.FAILED,
        error=error,
        side_effect=SideEffectReport(False, False, "nothing was attempted"),
    )
    return flow.but(result=result)


async def _release(services: Services, flow: Flow) -> None:
    try:
        await services.store.release_locks(flow.execution_id)
    except ToolgateError:
        log.warning("locks of %s stay until their lease expires", flow.execution_id)
