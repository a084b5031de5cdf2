"""Dry-run plans: what a call *would* do, with no side effect (``POST /v1/plans``, MCP's
``io.toolgate/dry_run``).

A plan runs the stages of ``runner.STAGES`` marked ``plans`` (resolve, normalise, validate
without the quota, policy with its state guards) on a ticket marked ``dry_run``, then
describes what the later stages would do: the locks it would take and the adapter's preview.
Nothing is written: no execution, no event, no idempotency key, no quota use. The stages'
events stay in the call's trail, which is never stored; the plan reads the policy's
decision from there. A plan is audited where nothing is stored: as one structured log line
(logger ``toolgate.plans``, level INFO: principal, run and call ids, tool, version, arguments
hash, decision, what would happen) and, when the policy was asked and the decision log is on,
as its decision-log event, labelled ``toolgate.kind: plan`` (``policy.decision_ids``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gateway.adapters.base import Previewing
from gateway.errors import UNRECORDED, CallError, ExecutionError
from gateway.pipeline.context import adapter_of
from gateway.pipeline.lock import lock_requests
from gateway.pipeline.outcomes import failed, ticket_of
from gateway.pipeline.policy import preview_of
from gateway.pipeline.records import (
    Authorized,
    Call,
    Prepared,
    Requested,
    Resolved,
    Settled,
    State,
    ToolExecutionRequest,
    Trail,
    Working,
)
from gateway.pipeline.runner import STAGES, Stage, drive
from gateway.pipeline.services import Services
from gateway.types import JSON, DecisionResult

log = logging.getLogger("toolgate.plans")

PLAN_STAGES: tuple[Stage[Any], ...] = tuple(s for s in STAGES if s.plans)
GUARD_ERRORS = frozenset({"state_mismatch", "unknown_state_key", "state_guard_error"})


@dataclass(frozen=True, slots=True)
class Plan:
    """What a call would do (docs/api.md#post-v1plans)."""

    would: str
    """``run``, ``await_approval`` or ``fail``."""
    tool: str
    version: str | None
    deprecated: bool | str
    arguments: dict[str, JSON] | None
    arguments_sha256: str | None
    validation: dict[str, JSON]
    state_guards: dict[str, JSON]
    policy: dict[str, JSON] | None
    locks: list[dict[str, JSON]]
    preview: JSON
    preview_available: bool
    error: dict[str, JSON] | None
    revisions: dict[str, str]
    """The catalogue and policy revisions the plan was made on."""

    def to_json(self) -> dict[str, JSON]:
        return {
            "dry_run": True,
            "would": self.would,
            "tool": {"name": self.tool, "version": self.version, "deprecated": self.deprecated},
            "arguments": self.arguments,
            "arguments_sha256": self.arguments_sha256,
            "validation": self.validation,
            "state_guards": self.state_guards,
            "policy": self.policy,
            "locks": self.locks,
            "preview": self.preview,
            "preview_available": self.preview_available,
            "error": self.error,
            "revisions": self.revisions,
        }


async def plan_call(services: Services, request: ToolExecutionRequest) -> Plan:
    """The plan of ``request``. ``RequestError`` and ``PolicyUnavailable`` propagate (the
    same 4xx or 503 as an execution); a ``CallError`` the real call would end ``failed`` on
    is part of the plan. It runs on the newest generation of the runtime, held until the
    plan is made."""
    with services.lease() as services:
        return await _plan_call(services, request)


async def _plan_call(services: Services, request: ToolExecutionRequest) -> Plan:
    planner = _Planner()
    start = Requested.start(request, dry_run=True)
    state = await drive(services, start, PLAN_STAGES, step=planner.step)
    error: CallError | None = None
    if planner.stopped is not None:
        state, error = planner.stopped  # described as it was when the stage failed
    elif isinstance(state, Settled) and state.result.error is not None:
        error = state.result.error if isinstance(state.result.error, CallError) else None
        if error is None:
            error = ExecutionError(state.result.error.message, code=state.result.error.code)
    plan = await _describe(services, state, planner.call, error)
    _audit(request, plan)
    return plan


class _Planner:
    """The step a plan runs each stage with (``runner.drive``'s ``step``), with the plan's
    treatment of what a stage raises: a ``CallError`` the real call would end ``failed`` on,
    or anything unexpected, stops the plan, which describes the call as it was then."""

    __slots__ = ("call", "stopped")

    def __init__(self) -> None:
        self.call: Call | None = None
        """The call as the last stage that made one left it."""
        self.stopped: tuple[Working, CallError] | None = None
        """The state the failing stage was given, and what stopped the plan."""

    async def step(
        self, stage: Stage[Any], services: Services, state: Working, execution_id: str
    ) -> State:
        try:
            current = await stage.run(services, state)
        except CallError as exc:
            error = exc
        except UNRECORDED:
            raise
        except Exception:
            tool = ticket_of(state).request.tool_name
            log.exception("plan of %s failed in stage %s", tool, stage.name)
            error = ExecutionError(
                f"the gateway failed in stage {stage.name} while planning; nothing was run",
                code="internal_error",
            )
        else:
            if isinstance(current, Prepared | Authorized):
                self.call = current.call
            return current
        self.stopped = (state, error)
        return failed(state, error)  # no stage a plan runs takes a settled call: it stops


async def _describe(
    services: Services, state: State, call: Call | None, error: CallError | None
) -> Plan:
    trail = _trail_of(state)
    decided = _event(trail, "policy.decided")
    resolved = _event(trail, "tool.resolved")
    awaiting = state.awaiting if isinstance(state, Authorized) else None
    result = decided.get("result") if decided else None
    locks: list[dict[str, JSON]] = []
    preview: JSON = None
    previewing = call is not None and isinstance(adapter_of(services, call), Previewing)
    if call is not None and error is None:
        try:
            locks = [{"key": r.key, "mode": r.mode.value} for r in lock_requests(call)]
        except CallError as exc:
            error = exc
    if call is not None and error is None and previewing:
        # never for a refused call: its preview would show state the caller may not see
        preview = awaiting.preview if awaiting is not None else await preview_of(services, call)
    would = "fail" if error else "await_approval" if awaiting else "run"
    return Plan(
        would=would,
        tool=call.tool.name if call else _tool_name(state, resolved),
        version=str(call.tool.version) if call else resolved.get("version"),
        deprecated=resolved.get("deprecated", False),
        arguments=dict(call.arguments) if call else None,
        arguments_sha256=call.arguments_sha256 if call else None,
        validation=_validation(call, error),
        state_guards=_guards(call, result, error),
        policy=_policy(services, call, decided, state, awaiting) if decided else None,
        locks=locks,
        preview=preview,
        preview_available=previewing,
        error=error.to_json() if error else None,
        revisions=services.revisions.to_json(),
    )


def _tool_name(state: State, resolved: dict[str, Any]) -> str:
    name = resolved.get("name")
    if isinstance(name, str):
        return name
    if isinstance(state, Requested | Resolved):
        return state.ticket.request.tool_name
    return ""


def _trail_of(state: State) -> Trail | None:
    return getattr(state, "trail", None)


def _event(trail: Trail | None, type_: str) -> dict[str, Any]:
    for event in reversed(trail.events if trail else ()):
        if event.type == type_:
            return event.data
    return {}


def _validation(call: Call | None, error: CallError | None) -> dict[str, JSON]:
    """Whether the request and its arguments pass resolve, normalise and validate."""
    if error is None or error.code in GUARD_ERRORS:
        return {"ok": call is not None}
    if error.phase is not None and error.phase.value in ("resolve", "validate"):
        return {"ok": False, "error": error.code}
    return {"ok": call is not None}


def _guards(call: Call | None, result: Any, error: CallError | None) -> dict[str, JSON]:
    keys: list[JSON] = sorted(call.ticket.request.expected_state) if call else []
    if not keys:
        return {"status": "none", "keys": []}
    if error is not None and error.code in GUARD_ERRORS:
        return {"status": "failed", "keys": keys, "error": error.to_json()}
    if result not in (DecisionResult.ALLOW.value, DecisionResult.REQUIRE_APPROVAL.value):
        return {"status": "not_checked", "keys": keys}  # the policy refused: never read
    return {"status": "passed", "keys": keys}


def _policy(
    services: Services,
    call: Call | None,
    decided: dict[str, Any],
    state: State,
    awaiting: Any,
) -> dict[str, JSON]:
    result = decided.get("result")
    approval: dict[str, JSON] = {"required": awaiting is not None}
    if awaiting is not None and call is not None:
        approval.update(_approvers(services, call, decided))
        approval["self_approval"] = services.policy_data.approvers.allow_self_approval
    if isinstance(state, Authorized) and state.approval is not None:
        approval["covered_by"] = state.approval.id
    return {"result": result, "reasons": list(decided.get("reasons", [])), "approval": approval}


def _approvers(services: Services, call: Call, decided: dict[str, Any]) -> dict[str, JSON]:
    """Who may approve, as the decision names them (its ``approver_roles``, which the shipped
    Rego checks an approval against), else as policy data's ``approvers`` for the tool's risk
    (a policy whose decision names none, or names them other than as a list of strings).
    The approval keeps the decision's roles and the approve route checks them
    (``runtime/approvals.check_approver``)."""
    named = decided.get("approver_roles")
    if isinstance(named, list) and all(isinstance(role, str) for role in named):
        return {"approver_roles": list(named), "approver_roles_from": "decision"}
    roles = services.policy_data.approvers.roles_for(call.tool.risk.value)
    return {"approver_roles": list(roles), "approver_roles_from": "policy_data"}


def _audit(request: ToolExecutionRequest, plan: Plan) -> None:
    decision = plan.policy["result"] if plan.policy else None
    fields = {
        "principal": request.principal,
        "agent_id": request.agent_id,
        "run_id": request.run_id,
        "call_id": request.call_id,
        "workspace": request.workspace_id,
        "tool": plan.tool,
        "version": plan.version,
        "arguments_sha256": plan.arguments_sha256,
        "decision": decision,
        "would": plan.would,
        "error": plan.error["type"] if plan.error else None,
    }
    log.info("plan " + " ".join(f"{k}={v}" for k, v in fields.items()), extra={"plan": fields})
