"""The pipeline: the ordered list of stages, and the one loop that runs a call through them
(``drive``: for calls, for plans (``plan.py``) and for recovery's ``rebuild``; metrics and
tracing watch it as observers, ``observers.py``).

Each stage is ``async def run(services, state) -> State``: it takes the record of the phase
it acts on (``Stage.takes``) and returns the next one, a ``Settled`` call (it ended early
with a result), or ``Ended`` (the call resolves to an execution that already exists, or is
parked). A stage whose record the call is not in is skipped: a call that settled early goes
straight to ``verify`` and ``commit``. A stage also ends a call by raising a ``CallError``
(the call becomes a failed execution in that error's phase).
``RequestError`` (400/409/422) and ``PolicyUnavailable`` (503: no decision could be had for
a new call) propagate: such a request never becomes an execution. Anything else that escapes
a stage is settled by the one catch-all below (``_escaped``): ``failed`` before the adapter
was called, reconciled or ``unknown`` after a write's adapter was; only ``StoreError``
(nothing can be recorded) still propagates, to recovery.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from gateway import jsontext
from gateway.adapters.base import SideEffectReport
from gateway.errors import (
    UNRECORDED,
    CallError,
    ExecutionError,
    NotFound,
    ToolgateError,
)
from gateway.observability import logs
from gateway.pipeline import (
    commit,
    execute,
    lock,
    normalise,
    policy,
    reserve,
    resolve,
    result,
    validate,
    verify,
)
from gateway.pipeline.observers import UNOBSERVED, Observer, Step, observing
from gateway.pipeline.outcomes import (
    Before,
    failed,
    record_of,
    settled,
    started_ms_of,
    ticket_of,
    tool_of,
)
from gateway.pipeline.reconcile import WRITES, reconcile
from gateway.pipeline.records import (
    Authorized,
    Call,
    Ended,
    Executed,
    Locked,
    Prepared,
    Requested,
    Reserved,
    Resolved,
    Settled,
    Started,
    State,
    ToolExecutionRequest,
    ToolResult,
    Trail,
    Working,
)
from gateway.pipeline.services import Services
from gateway.store.records import ApprovalRecord, ExecutionRecord
from gateway.types import Outcome

log = logging.getLogger("toolgate.pipeline")
S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Stage(Generic[S]):
    """One stage: its name (that of its module), the record it takes, its function, and
    whether a dry-run plan runs it (``plans``: the stages that change nothing); the fault
    points before and after it (``FAULT_POINTS``) are filled in from its name."""

    name: str
    takes: type[S]
    run: Callable[[Services, S], Awaitable[State]]
    plans: bool = False
    before: str | None = field(default=None, init=False, compare=False)
    after: str | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        before, after = FAULT_POINTS.get(self.name, (None, None))
        object.__setattr__(self, "before", before)
        object.__setattr__(self, "after", after)


FAULT_POINTS: dict[str, tuple[str | None, str | None]] = {
    "reserve": (None, "after_reserve"),
    "verify": ("during_verify", None),
    "commit": ("before_commit", "after_commit"),
}
"""Stage → (fault point before it, fault point after it); execute has its own two."""


STAGES: tuple[Stage[Any], ...] = (
    Stage("resolve", Requested, resolve.run, plans=True),
    Stage("normalise", Resolved, normalise.run, plans=True),
    Stage("validate", Prepared, validate.run, plans=True),  # without the quota in a plan
    Stage("policy", Prepared, policy.run, plans=True),
    Stage("reserve", Authorized, reserve.run),
    Stage("lock", Reserved, lock.run),
    Stage("execute", Locked, execute.run),
    Stage("result", Executed, result.run),
    Stage("verify", Settled, verify.run),
    Stage("commit", Settled, commit.run),
)


async def run_call(
    services: Services,
    request: ToolExecutionRequest,
    stages: tuple[Stage[Any], ...] = STAGES,
    respond_async: bool = False,
) -> ExecutionRecord:
    """Run one call through ``stages``; returns the execution as the store now holds it.

    With ``respond_async`` the call stops once reserved (status ``queued``) and a worker
    runs the rest (``run_queued``)."""
    return await run_flow(services, Requested.start(request, respond_async), stages)


async def run_queued(services: Services, record: ExecutionRecord) -> ExecutionRecord:
    """Run a queued execution this process has claimed; validation and policy run again."""
    events = await services.store.events(record.id)
    return await run_flow(services, Requested.dequeued(record, _next_seq(events)))


async def resume_call(services: Services, approval: ApprovalRecord) -> ExecutionRecord:
    """Continue the execution parked for ``approval`` (now approved): validation and
    policy run again, since the world may have changed while it waited."""
    record = await services.store.get_execution(approval.execution_id)
    if record is None:
        raise NotFound(f"execution {approval.execution_id} of approval {approval.id} is gone")
    events = await services.store.events(record.id)
    return await run_flow(services, Requested.resume(record, approval, _next_seq(events)))


REBUILT: tuple[Stage[Any], ...] = STAGES[:2]
"""The stages ``rebuild`` runs: those up to normalise (resolve, normalise)."""


async def rebuild(services: Services, record: ExecutionRecord) -> Call:
    """The call of a stored execution as far as normalisation (what its probes and its
    adapter's ``recover`` need): how recovery rebuilds a call it settles. Raises what those
    stages raise (the tool or the workspace may be gone): the call is not settled here."""
    state = await drive(services, Requested.dequeued(record, 0), REBUILT, step=_unguarded)
    if not isinstance(state, Prepared):
        raise ExecutionError(f"execution {record.id} could not be rebuilt as far as normalise")
    return state.call


async def _unguarded(
    stage: Stage[Any], services: Services, state: Working, execution_id: str
) -> State:
    return await stage.run(services, state)


def _next_seq(events: list[Any]) -> int:
    return events[-1].seq + 1 if events else 0


async def run_flow(
    services: Services, state: Requested, stages: tuple[Stage[Any], ...] = STAGES
) -> ExecutionRecord:
    """Run the call ``state`` through ``stages``, on the newest generation of the runtime,
    held until the call ends (a reload meanwhile changes nothing for it)."""
    with services.lease() as services:
        state = state.stamped(services.revisions)
        if services.settings.log_format != "json":
            return await _run_flow(services, state, stages)
        with logs.bind_call(_log_fields(state)):
            record = await _run_flow(services, state, stages)
            if log.isEnabledFor(logging.INFO):
                shown = record.outcome if record.terminal else str(record.status)
                log.info("execution %s: %s", record.id, shown, extra={"outcome": shown})
            return record


def _log_fields(state: Requested) -> dict[str, str]:
    request = state.ticket.request
    parts = (request.traceparent or "").split("-")
    return {
        "execution_id": state.ticket.execution_id,
        "run_id": request.run_id,
        "call_id": request.call_id,
        "tool": request.tool_name,
        "principal": request.principal,
        "trace_id": parts[1] if len(parts) == 4 else "",
    }


async def _run_flow(
    services: Services, state: Requested, stages: tuple[Stage[Any], ...]
) -> ExecutionRecord:
    execution_id = state.ticket.execution_id
    services.active.add(execution_id)
    try:
        current = await drive(services, state, stages, observing(services.telemetry))
    finally:
        services.active.discard(execution_id)
    assert isinstance(current, Ended), "the last stage ends every call"
    return current.record


_HOLDING = (Locked, Executed, Settled)


def _holds_locks(state: State) -> bool:
    """Whether the call holds locks its commit did not release."""
    if isinstance(state, Ended):
        return state.release_locks
    if isinstance(state, _HOLDING):
        record = state.record
        return bool(state.fencing) and (record is None or not record.terminal)
    return False


async def _run_stage(
    stage: Stage[Any], services: Services, state: Working, execution_id: str
) -> State:
    # the fault points are looked at only when a fault plan is set (tests, chaos runs)
    faults = services.faults
    current: State = state
    try:
        if stage.before and faults.plan:
            await faults.hit(stage.before)
        current = await stage.run(services, state)
        if (
            stage.after
            and faults.plan
            and (_durable(current, execution_id) or stage.name == "commit")
        ):
            await faults.hit(stage.after)
        return current
    except CallError as exc:
        if isinstance(current, Ended):
            return current
        if started_ms_of(current) is not None and stage.name != "execute":
            # too late to end it "failed"
            return await _escaped(stage, services, current, execution_id, exc)
        return failed(current, exc)
    except UNRECORDED:
        raise  # 4xx by design, no decision to be had; or the store cannot record anything
    except Exception as exc:
        return await _escaped(stage, services, current, execution_id, exc)


def _durable(state: State, execution_id: str) -> bool:
    """Whether the call's own execution is in the store."""
    if isinstance(state, Ended):
        return state.record.id == execution_id
    return record_of(state) is not None


async def drive(
    services: Services,
    state: Requested,
    stages: tuple[Stage[Any], ...],
    observer: Observer = UNOBSERVED,
    step: Step = _run_stage,
) -> State:
    """The one stage driver, for calls, plans and ``rebuild``: runs each of ``stages`` whose
    record the call is in, with ``step`` (a call's is the catch-all ``_run_stage``), until
    the call has ``Ended`` or the stages run out, and returns the state it stopped in.
    ``observer`` watches the call (``observers.py``: metrics, tracing). However the call
    leaves, by an exception too, the locks it still holds are released."""
    execution_id = state.ticket.execution_id
    current: State = state
    try:
        with observer.watching(state):
            for stage in stages:
                if isinstance(current, Ended):
                    break
                if isinstance(current, stage.takes):
                    current = await observer.stage(stage, services, current, execution_id, step)
            observer.ended(current)
    finally:
        if _holds_locks(current):
            await _release(services, execution_id)
    return current


# -- the catch-all ----------------------------------------------------------------------------
#
# Whatever escapes a stage (a bug, an injected fault, a foreign exception no edge
# translated) ends the call here, once, with a terminal and truthful outcome that is then
# committed like any other: ``failed`` with nothing attempted while the side effect cannot
# have begun; after it may have begun, what the reconcile probes show, else ``unknown``.
# The caller gets a result (200), never the exception; the traceback goes to the log.


async def _escaped(
    stage: Stage[Any], services: Services, state: State, execution_id: str, exc: Exception
) -> State:
    escaped: Before | Ended = state
    adapter_called = not isinstance(state, Ended) and started_ms_of(state) is not None
    if isinstance(exc, execute.Escaped):
        escaped, adapter_called = exc.state, exc.adapter_called
    cause = exc.__cause__ if isinstance(exc, execute.Escaped) else exc
    log.error(
        "stage %s failed for execution %s",
        stage.name,
        execution_id,
        exc_info=(type(cause), cause, cause.__traceback__) if cause else None,
    )
    if isinstance(escaped, Ended):
        return escaped  # it had ended already: that stands
    tool = tool_of(escaped)
    if not adapter_called or tool is None or tool.side_effect not in WRITES:
        nothing = "nothing was executed" if not adapter_called else "it changed nothing"
        ended = failed(escaped, _internal(stage, execution_id, nothing))
    else:
        ended = await _uncertain(stage, services, escaped, execution_id)
    if stage.name == "commit":
        return await _commit_anyway(services, ended)
    return ended


def _internal(stage: Stage[Any], execution_id: str, what: str) -> ExecutionError:
    return ExecutionError(
        f"the gateway failed in stage {stage.name}; {what} "
        f"(see the gateway log for execution {execution_id})",
        code="internal_error",
    )


async def _uncertain(
    stage: Stage[Any], services: Services, state: Before, execution_id: str
) -> Settled:
    """A write whose side effect may have begun: reconciled by its probes when the
    failure came before the result was settled, else ``unknown``."""
    error = _internal(stage, execution_id, "the side effect may have happened")
    tool = tool_of(state)
    base = (
        state.result
        if isinstance(state, Settled)
        else ToolResult(
            call_id=ticket_of(state).request.call_id,
            tool_version=str(tool.version) if tool else None,
            outcome=Outcome.UNKNOWN,
        )
    )
    if stage.name == "execute" and isinstance(state, Started | Executed):
        try:
            found = await reconcile(
                services, state.call, base, error, Outcome.FAILED, state.fencing
            )
            return settled(state, found)
        except Exception:
            log.exception("reconciling execution %s failed", execution_id)
    unknown = replace(
        base,
        outcome=Outcome.UNKNOWN,
        error=error,
        side_effect=SideEffectReport(True, False, "the side effect may have happened"),
    )
    return settled(state, unknown)


async def _commit_anyway(services: Services, state: Settled) -> Ended:
    """The commit stage itself failed (not the store): commit a bare result instead, with
    nothing of the one that could not be recorded but its outcome's truth."""
    bare = replace(state.result, data=None, evidence=(), truncated=False)
    trail = state.trail
    storable = Trail(
        trail.execution_id, tuple(e for e in trail.events if _storable(e.data)), trail.seq
    )
    return await commit.run(services, replace(state, result=bare, trail=storable))


def _storable(data: object) -> bool:
    """Whether event data can be stored (the commit that failed may have failed on it)."""
    try:
        jsontext.stored(data)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return True


async def _release(services: Services, execution_id: str) -> None:
    try:
        await services.store.release_locks(execution_id)
    except ToolgateError:
        log.warning("locks of %s stay until their lease expires", execution_id)
