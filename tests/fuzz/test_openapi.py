"""schemathesis against the served ``/openapi.json``, with alice's demo key: every operation
gets generated requests, valid (positive) and schema-violating (negative); none may answer
5xx, and every error answers ``application/problem+json`` with a problem body.

Bounded for CI: a fixed number of examples per operation and mode, derandomized (the same
requests every run, so a failure reproduces), no deadline, no example database. The volume
sent is recorded in ``VOLUME`` and printed (``pytest -s``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.helpers import ALICE, FUZZ_SCALE

EXAMPLES = 10 * FUZZ_SCALE
"""Per operation and generation mode."""
AUTH = {"Authorization": f"Bearer {ALICE}"}
VOLUME: dict[str, int] = {"requests": 0, "errors_4xx": 0, "no_negative_case": 0}


def _content_type(headers: Mapping[str, Any]) -> str:
    value = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    return str(value[0] if isinstance(value, list) else value)


def check_response(method: str, path: str, status: int, content_type: str, body: bytes) -> None:
    where = f"{method} {path} -> {status}"
    assert status < 500, f"{where}: {body[:500]!r}"
    if status >= 400:
        assert content_type.split(";")[0].strip() == "application/problem+json", (
            f"{where}: error as {content_type!r}: {body[:300]!r}"
        )
        problem = json.loads(body)
        assert isinstance(problem, dict), where
        assert problem.get("status") == status, f"{where}: {problem}"
        assert isinstance(problem.get("title"), str), f"{where}: {problem}"


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_openapi_operations_never_5xx_and_errors_are_problems(
    served: str, mode: GenerationMode
) -> None:
    VOLUME.update(dict.fromkeys(VOLUME, 0))
    schema = schemathesis.openapi.from_url(served + "/openapi.json", headers=AUTH)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15, [op.label for op in operations]
    for operation in operations:
        strategy = operation.as_strategy(generation_mode=mode)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def run(case: schemathesis.Case) -> None:
            response = case.call(base_url=served, headers=AUTH, timeout=10)
            VOLUME["requests"] += 1
            if response.status_code >= 400:
                VOLUME["errors_4xx"] += 1
            check_response(
                case.method,
                case.formatted_path,
                response.status_code,
                _content_type(response.headers),
                response.content,
            )

        try:
            run()
        except Unsatisfiable:
            # No schema-violating request exists for an operation without parameters or body.
            assert mode is GenerationMode.NEGATIVE, operation.label
            VOLUME["no_negative_case"] += 1
    print(f"openapi fuzz ({mode.value}): {len(operations)} operations, {VOLUME}")
    assert VOLUME["requests"] >= len(operations)
