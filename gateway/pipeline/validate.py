"""Stage 3 — validate: runtime checks (deadline, idempotency key, quota); the schema layer
ran in normalise.

``check_state_guards`` compares ``expected_state`` with the real state. It runs only once
policy has allowed the call (stage 4; reading state for a caller the policy would refuse
would leak it), and again after the locks are taken (stage 6): a compare-and-swap guard is
only atomic inside the same critical section as the write.
"""

from __future__ import annotations

import time

from gateway.declarations.templates import TemplateError, _text
from gateway.errors import MalformedRequest, ValidationError
from gateway.pipeline.context import adapter_call, adapter_of
from gateway.pipeline.records import Flow
from gateway.pipeline.services import Services


async def run(services: Services, flow: Flow) -> Flow:
    assert flow.tool is not None
    req = flow.request
    if req.deadline_ms is not None and req.deadline_ms <= time.time() * 1000:
        raise ValidationError(
            "the deadline has already passed; send a later deadline", code="deadline_exceeded"
        )
    if flow.tool.idempotency == "required" and not req.idempotency_key:
        raise MalformedRequest(
            f"{flow.tool.name} requires an idempotency key (idempotency_key or the "
            "Idempotency-Key header)",
            code="idempotency_key_required",
        )
    await check_quota(services, flow)
    return flow


async def check_quota(services: Services, flow: Flow) -> None:
    """Calls per sliding minute per actor, workspace and tool risk (policy data ``quotas``).

    A soft limit: calls racing each other may pass together by a few.
    """
    assert flow.tool is not None
    if flow.approval is not None or flow.record is not None:
        return  # resumed or dequeued: this call already counted when it was reserved
    limit = services.policy_data.quota(flow.tool.risk.value)
    if limit is None:
        return
    now = int(time.time() * 1000)
    req = flow.request
    count, oldest = await services.store.recent_usage(
        req.principal, req.workspace_id, flow.tool.risk.value, now - 60_000, int(limit)
    )
    if count < int(limit):
        return
    retry_ms = max((oldest or now) + 60_000 - now, 1)
    raise ValidationError(
        f"quota exceeded: {limit} calls per minute of {flow.tool.risk.value}-risk tools in "
        f"workspace {req.workspace_id}; retry in {retry_ms / 1000:.1f} s",
        code="quota_exceeded",
        retryable=True,
        details={"retry_after_ms": retry_ms},
    )


async def check_state_guards(services: Services, flow: Flow) -> None:
    """Compare every ``expected_state`` key with the real state read by its probe."""
    assert flow.tool is not None
    expected = flow.request.expected_state
    if not expected:
        return
    guards = {g.expected: g for g in flow.tool.state_guards}
    unknown = sorted(set(expected) - set(guards))
    if unknown:
        known = ", ".join(sorted(guards)) or "none"
        raise ValidationError(
            f"expected_state has keys {unknown} that {flow.tool.ref} cannot check "
            f"(supported: {known})",
            code="unknown_state_key",
        )
    call = adapter_call(services, flow)
    adapter = adapter_of(services, flow)
    for key, want in sorted(expected.items()):
        guard = guards[key]
        try:
            params = {k: t.render(call.context) for k, t in guard.params.items()}
        except TemplateError as exc:
            raise ValidationError(f"state guard {key}: {exc}", code="state_guard_error") from exc
        actual = await adapter.probe(guard.actual, params, call)
        if _text(actual) != _text(want):
            raise ValidationError(
                f"expected_state.{key} does not match: expected {_text(want) or 'absent'}, "
                f"found {_text(actual) or 'absent'}; re-read the state and retry",
                code="state_mismatch",
                details={"expected": want, "actual": actual},
            )
