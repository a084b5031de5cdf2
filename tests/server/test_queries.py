"""Every REST route that reads a query takes only the parameters it documents, each once:
anything else is 400 invalid_query (``routes._query``), on the JSON answer and the stream."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from gateway.server.openapi import build_openapi
from tests.helpers import BOB
from tests.server.helpers import auth, body

QUERIED = {
    path: [p["name"] for p in op.get("parameters", []) if p.get("in") == "query"]
    for path, item in build_openapi()["paths"].items()
    for method, op in item.items()
    if method == "get" and any(p.get("in") == "query" for p in op.get("parameters", []))
}
"""Each GET route with query parameters, and their names, as /openapi.json documents them."""

SAMPLES = {
    "wait": "0",
    "run_id": "run-1",
    "call_id": "c1",
    "status": "pending",
    "format": "llm",
    "workspace": "demo",
    "version": "^1",
}
"""A value each parameter takes (``after`` is the route's: a seq, or a run's cursor)."""


def test_every_route_that_reads_a_query_is_here() -> None:
    assert sorted(QUERIED) == [
        "/v1/approvals",
        "/v1/executions",
        "/v1/executions/{execution_id}",
        "/v1/executions/{execution_id}/events",
        "/v1/runs/{run_id}/events",
        "/v1/tools",
        "/v1/tools/{name}",
    ]


@pytest.mark.parametrize("path", sorted(QUERIED))
def test_a_route_takes_its_documented_parameters_and_no_other_nor_one_twice(
    client: TestClient, path: str
) -> None:
    done = client.post(
        "/v1/executions", json=body("fs.read_file", {"path": "nope.txt"}), headers=auth()
    ).json()
    url = path.format(execution_id=done["id"], run_id="run-1", name="fs.read_file")
    after = f"{done['id']}:0" if path.startswith("/v1/runs/") else "0"
    documented = {name: SAMPLES.get(name, after) for name in QUERIED[path]}
    streams = [{}, {"Accept": "text/event-stream"}] if path.endswith("/events") else [{}]

    def get(params: list[tuple[str, str]], headers: dict[str, str]) -> tuple[int, str]:
        answer = client.get(url, params=params, headers={**auth(BOB), **headers})
        code = answer.json()["code"] if answer.status_code >= 400 else ""
        return answer.status_code, code

    for stream in streams:
        assert get(list(documented.items()), stream) == (200, ""), (path, stream)
        assert get([*documented.items(), ("bogus", "1")], stream) == (400, "invalid_query")
        for name, value in documented.items():
            twice = [*documented.items(), (name, value)]
            assert get(twice, stream) == (400, "invalid_query"), (path, name, stream)
