"""Stage 3 — validate: runtime checks (deadline, idempotency key, quota); the schema layer
ran in normalise. The state guards run later (``guards.py``), once the policy allowed the
call."""

from __future__ import annotations

import time

from gateway.errors import MalformedRequest, ValidationError
from gateway.pipeline.records import Call, Prepared
from gateway.pipeline.services import Services


async def run(services: Services, state: Prepared) -> Prepared:
    call = state.call
    req, tool = call.ticket.request, call.tool
    if req.deadline_ms is not None and req.deadline_ms <= time.time() * 1000:
        raise ValidationError(
            "the deadline has already passed; send a later deadline", code="deadline_exceeded"
        )
    if tool.idempotency == "required" and not req.idempotency_key:
        raise MalformedRequest(
            f"{tool.name} requires an idempotency key (idempotency_key or the "
            "Idempotency-Key header)",
            code="idempotency_key_required",
        )
    await check_quota(services, call)
    return state


async def check_quota(services: Services, call: Call) -> None:
    """Calls per sliding minute per actor, workspace and tool risk (policy data ``quotas``).

    A soft limit: calls racing each other may pass together by a few.
    """
    ticket, tool = call.ticket, call.tool
    if ticket.stored is not None:
        return  # resumed or dequeued: this call already counted when it was reserved
    if ticket.dry_run:
        return  # a plan counts against no quota (and reports none)
    limit = services.policy_data.quota(tool.risk.value)
    if limit is None:
        return
    now = int(time.time() * 1000)
    req = ticket.request
    count, oldest = await services.store.recent_usage(
        req.principal, req.workspace_id, tool.risk.value, now - 60_000, int(limit)
    )
    if count < int(limit):
        return
    retry_ms = max((oldest or now) + 60_000 - now, 1)
    raise ValidationError(
        f"quota exceeded: {limit} calls per minute of {tool.risk.value}-risk tools in "
        f"workspace {req.workspace_id}; retry in {retry_ms / 1000:.1f} s",
        code="quota_exceeded",
        retryable=True,
        details={"retry_after_ms": retry_ms},
    )
