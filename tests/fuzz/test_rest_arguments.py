"""``POST /v1/executions`` of the shipped tools with arbitrary arguments, on a real gateway
as alice: where schemathesis draws random tool names (404s), this reaches normalisation,
policy and the adapters. No answer may be 5xx; an error is problem+json; no accepted call
ends in an internal error (an exception the pipeline did not expect)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz.strategies import ARGUMENT_KEYS, TOOLS, argument_values, json_values
from tests.fuzz.test_openapi import check_response
from tests.helpers import ALICE, FUZZ_SCALE

EXAMPLES = 120 * FUZZ_SCALE
VOLUME: dict[str, int] = {"requests": 0, "accepted": 0, "refused": 0}
_calls = itertools.count()


@st.composite
def calls(draw: st.DrawFn) -> dict[str, Any]:
    tool = draw(st.sampled_from(TOOLS))
    keys = ARGUMENT_KEYS[tool] or ("x",)
    arguments = draw(
        st.fixed_dictionaries({key: argument_values for key in keys})
        | st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), argument_values, max_size=4)
    )
    body: dict[str, Any] = {
        "run_id": "fuzz",
        "turn_id": "t",
        "call_id": f"c{next(_calls)}",
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "fuzz"},
        "workspace": {"id": "demo"},
    }
    if draw(st.integers(0, 4)) == 0:
        body[draw(st.sampled_from(["idempotency_key", "expected_state", "deadline_ms", "x"]))] = (
            draw(json_values)
        )
    return body


@pytest.fixture(scope="module")
def http(served: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ALICE}", "Prefer": "wait=5"}
    with httpx.Client(base_url=served, headers=headers, timeout=30) as client:
        yield client


def test_shipped_tools_with_arbitrary_arguments_never_5xx(http: httpx.Client) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(body=calls())
    def run(body: dict[str, Any]) -> None:
        response = http.post("/v1/executions", json=body)
        VOLUME["requests"] += 1
        kind = response.headers.get("content-type", "")
        check_response("POST", "/v1/executions", response.status_code, kind, response.content)
        if response.status_code < 400:
            VOLUME["accepted"] += 1
            execution = response.json()
            assert execution["status"] in {
                "completed",
                "running",
                "queued",
                "awaiting_approval",
                "pending",
            } or execution.get("result"), execution
        else:
            VOLUME["refused"] += 1

    run()
    print(f"rest arguments fuzz: {VOLUME}")
    assert VOLUME["requests"] == EXAMPLES and VOLUME["accepted"] > 0
