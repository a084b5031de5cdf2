"""Stage validate (gateway/pipeline/validate.py): deadline, idempotency key and quota."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.errors import MalformedRequest, ValidationError
from gateway.pipeline import validate
from gateway.policy.data import PolicyData
from gateway.store.store import Store
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


async def test_a_passed_deadline_is_refused(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    state = await prepared(services, request(deadline_ms=int(time.time() * 1000) - 1))
    with pytest.raises(ValidationError) as caught:
        await validate.run(services, state)
    assert caught.value.code == "deadline_exceeded"


async def test_a_valid_call_passes_unchanged(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    state = await prepared(services, request())
    assert await validate.run(services, state) is state


async def test_a_tool_that_requires_a_key_refuses_a_call_without_one(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    state = await prepared(services, request())
    tool = state.call.tool.model_copy(update={"idempotency": "required"})
    state = replace(state, call=replace(state.call, tool=tool))
    with pytest.raises(MalformedRequest) as caught:
        await validate.run(services, state)
    assert caught.value.code == "idempotency_key_required"


async def test_the_quota_counts_calls_per_risk(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    state = await prepared(services, request())
    risk = state.call.tool.risk.value
    quotas = PolicyData.parse({"quotas": {"calls_per_minute": {risk: 0}}})
    limited = replace(services, policy_data=quotas)
    with pytest.raises(ValidationError) as caught:
        await validate.run(limited, state)
    assert caught.value.code == "quota_exceeded" and caught.value.retryable is True
