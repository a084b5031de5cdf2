"""Stage validate (gateway/pipeline/validate.py): deadline, idempotency key and quota."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from gateway.errors import MalformedRequest, ValidationError
from gateway.pipeline import validate
from gateway.pipeline.services import Services
from gateway.policy.data import PolicyData
from tests.pipeline.fakes import prepared, request

pytestmark = pytest.mark.anyio


async def test_a_passed_deadline_is_refused(services: Services) -> None:
    state = await prepared(services, request(deadline_ms=int(time.time() * 1000) - 1))
    with pytest.raises(ValidationError) as caught:
        await validate.run(services, state)
    assert caught.value.code == "deadline_exceeded"


async def test_a_valid_call_passes_unchanged(services: Services) -> None:
    state = await prepared(services, request())
    assert await validate.run(services, state) is state


async def test_a_tool_that_requires_a_key_refuses_a_call_without_one(services: Services) -> None:
    state = await prepared(services, request())
    tool = state.call.tool.model_copy(update={"idempotency": "required"})
    state = replace(state, call=replace(state.call, tool=tool))
    with pytest.raises(MalformedRequest) as caught:
        await validate.run(services, state)
    assert caught.value.code == "idempotency_key_required"


async def test_the_quota_counts_calls_per_risk(services: Services) -> None:
    state = await prepared(services, request())
    risk = state.call.tool.risk.value
    quotas = PolicyData.parse({"quotas": {"calls_per_minute": {risk: 0}}})
    limited = replace(services, policy_data=quotas)
    with pytest.raises(ValidationError) as caught:
        await validate.run(limited, state)
    assert caught.value.code == "quota_exceeded" and caught.value.retryable is True
