"""``/openapi.json`` is a valid OpenAPI 3.1 document a client can be generated from: every
route of the app is an operation with a unique ``operationId`` (the name a generator gives
its function), and every status docs/api.md gives a route is one of its typed responses.
The generated client itself runs against a real gateway in tests/client/test_openapi_client.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.server.openapi import UNDESCRIBED, build_openapi
from gateway.settings import Settings
from tests.helpers import ALICE, BOB
from tests.server.helpers import auth, body
from tests.test_docs import doc, section

METHODS = ("get", "post", "put", "patch", "delete")
STATUSES = frozenset(
    str(s) for s in (200, 202, 304, 400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 431, 500, 503)
)
"""What a number in docs/api.md must be to count as a status: one the gateway answers."""
ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/[^\s`?,)]*)")
STATUS = re.compile(r"(?<![\w.$/-])([1-5]\d\d)(?![\w.%/-])")


def _served(client: TestClient) -> dict[str, Any]:
    response = client.get("/openapi.json", headers=auth())
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def _app_routes(settings: Settings) -> list[tuple[str, str]]:
    """(method, OpenAPI path) of every route of the app but the undescribed doors."""
    found = []
    for route in create_app(settings).routes:
        assert isinstance(route, Route), route
        if route.path.startswith(UNDESCRIBED):
            continue
        path = _plain(route.path)
        found += [(m.lower(), path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return found


def _operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def test_the_served_document_is_valid_openapi_3_1(client: TestClient) -> None:
    document = _served(client)
    assert document["openapi"] == "3.1.0"
    validate(document)  # raises OpenAPIValidationError, naming the fault


def test_every_route_is_an_operation_with_a_unique_operation_id(settings: Settings) -> None:
    routes = _app_routes(settings)
    assert ("post", "/v1/executions") in routes and len(routes) > 20
    operations = _operations(build_openapi())
    missing = [f"{m.upper()} {p}" for m, p in routes if (m, p) not in operations]
    assert not missing, f"routes of the app that /openapi.json does not describe: {missing}"
    extra = [f"{m.upper()} {p}" for m, p in operations if (m, p) not in routes]
    assert not extra, f"operations of /openapi.json that no route answers: {extra}"
    ids = [op.get("operationId") for op in operations.values()]
    assert all(isinstance(i, str) and re.fullmatch(r"[a-z][A-Za-z]+", i) for i in ids), ids
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)


def test_the_operation_ids_are_the_ones_api_md_names() -> None:
    """The routes table of docs/api.md names each route's operationId: a client's function
    names are part of the API, changed only on purpose."""
    named = dict(_documented_ids())
    operations = _operations(build_openapi())
    ids = {f"{m.upper()} {p}": op["operationId"] for (m, p), op in operations.items()}
    assert named == ids


def _documented_ids() -> list[tuple[str, str]]:
    pairs = []
    for line in section(doc("api.md"), "## Routes").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[1].startswith("`") and cells[1] != "operationId":
            found = re.findall(r"`((?:GET|POST|DELETE) [^`]+)`", cells[0])
            routes = [_plain(route) for route in found]
            operation_ids = re.findall(r"`(\w+)`", cells[1])
            if len(routes) == len(operation_ids):
                pairs += zip(routes, operation_ids, strict=True)
    return pairs


def _plain(path: str) -> str:
    """A Starlette path as OpenAPI writes it: ``{path:path}`` is ``{path}``."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def documented_statuses(text: str) -> dict[str, set[str]]:
    """The statuses docs/api.md gives each route ``METHOD /path``: those of its row in the
    routes table (the first cell names the route), and those of a row of any other table
    that names the route in a later cell (the first cell is the status, as in the table of
    request errors)."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = line.strip().strip("|").split("|")
        named = [(ROUTE.findall(cells[0]), "|".join(cells[1:]))]
        named += [(ROUTE.findall(cell), cells[0]) for cell in cells[1:]]
        for routes, where in named:
            statuses = {s for s in STATUS.findall(where) if s in STATUSES}
            for method, path in routes:
                found.setdefault(f"{method} {_plain(path)}", set()).update(statuses)
    return found


def test_every_status_api_md_gives_a_route_is_a_typed_response() -> None:
    document = build_openapi()
    operations = _operations(document)
    statuses = documented_statuses(doc("api.md"))
    assert statuses["POST /v1/executions"] >= {"200", "202", "409", "413", "415", "422"}
    undocumented = {}
    for (method, path), operation in operations.items():
        responses = operation["responses"]
        missing = statuses.get(f"{method.upper()} {path}", set()) - set(responses)
        if missing:
            undocumented[f"{method.upper()} {path}"] = sorted(missing)
        for status, response in responses.items():
            response = _resolve(document, response)
            assert response.get("description"), (path, method, status)
            if status.startswith(("4", "5")) and "content" in response:
                assert "application/problem+json" in response["content"] or (path == "/readyz"), (
                    path,
                    method,
                    status,
                )
    assert not undocumented, f"statuses docs/api.md gives that /openapi.json lacks: {undocumented}"


def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in item:
        node: Any = document
        for part in item["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        item = node
    return item


@pytest.mark.parametrize(
    ("method", "path", "header"),
    [
        ("post", "/v1/executions", "Idempotency-Key"),
        ("post", "/v1/executions", "Prefer"),
        ("post", "/v1/executions", "traceparent"),
        ("post", "/v1/plans", "Idempotency-Key"),
        ("get", "/v1/executions/{execution_id}/events", "Last-Event-ID"),
        ("get", "/v1/runs/{run_id}/events", "Last-Event-ID"),
        ("get", "/v1/policy/bundle", "If-None-Match"),
    ],
)
def test_the_headers_a_route_reads_are_parameters(method: str, path: str, header: str) -> None:
    document = build_openapi()
    parameters = [_resolve(document, p) for p in document["paths"][path][method]["parameters"]]
    assert {"name": header, "in": "header"}.items() <= next(
        (p for p in parameters if p["name"] == header), {}
    ).items(), [p["name"] for p in parameters]


@pytest.mark.parametrize(
    ("path", "names"),
    [("/v1/approvals", {"status", "run_id", "call_id"}), ("/v1/executions", {"run_id", "call_id"})],
)
def test_the_query_parameters_a_listing_takes_are_parameters(path: str, names: set[str]) -> None:
    """What the route's handler takes (``routes._query``), no more, no less: a generated
    client offers exactly the filters the route answers to."""
    operation = build_openapi()["paths"][path]["get"]
    assert {p["name"] for p in operation["parameters"] if p.get("in") == "query"} == names


def test_refusals_that_say_when_to_retry_document_retry_after() -> None:
    document = build_openapi()
    operations = _operations(document)
    for status in ("429", "503"):
        for (method, path), operation in operations.items():
            response = operation["responses"].get(status)
            if response is None or path == "/readyz":
                continue
            headers = _resolve(document, response).get("headers", {})
            assert "Retry-After" in headers, (method, path, status)
    created = operations[("post", "/v1/executions")]["responses"]
    assert "Retry-After" in created["409"]["headers"]  # idempotency_key_in_flight
    unauthorized = _resolve(document, created["401"])
    assert "WWW-Authenticate" in unauthorized["headers"]


def test_the_problem_schema_takes_any_code() -> None:
    """Codes are added as the gateway grows (a new 503, a new 400): the schema is one
    generic problem, its ``code`` any string, its object open to the fields a code adds."""
    problem = build_openapi()["components"]["schemas"]["Problem"]
    assert problem["properties"]["code"] == {
        "type": "string",
        "description": problem["properties"]["code"]["description"],
    }
    assert problem.get("additionalProperties", True) is not False


def test_the_status_reader_can_fail() -> None:
    text = (
        "| method and path | operationId | what | answers |\n| --- | --- | --- | --- |\n"
        "| `GET /v1/x/{p:path}` | `getX` | at most 100 | 200 / 304; 404 |\n\n"
        "### GET /v1/x\n\nA bad id is 409 `conflict`.\n\n"
        "| 400 | `bad` | `GET /v1/x/{p:path}?q=` is bad |\n| 429 | `busy` | no route |\n"
    )
    assert documented_statuses(text) == {"GET /v1/x/{p}": {"200", "304", "404", "400"}}


class _Checked:
    """Requests whose answers must match the schema the document gives their operation and
    status (the one a generated client parses them with)."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.document = build_openapi()
        self.checked: list[str] = []

    def __call__(self, method: str, template: str, key: str = ALICE, **params: Any) -> Any:
        path_params = {k: params.pop(k) for k in re.findall(r"\{(\w+)\}", template)}
        url = template.format(**path_params)
        response = self.client.request(method, url, headers=auth(key), **params)
        operation = self.document["paths"][template][method.lower()]
        status = str(response.status_code)
        assert status in operation["responses"], (method, url, status, response.text)
        documented = _resolve(self.document, operation["responses"][status])
        media = response.headers["content-type"].split(";")[0]
        schema = documented["content"][media]["schema"]
        root = {**schema, "components": self.document["components"]}
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in Draft202012Validator(root).iter_errors(response.json())
        ]
        assert not errors, (method, url, status, errors)
        self.checked.append(f"{method} {template} {status}")
        return response.json()


def test_real_answers_match_the_documented_schemas(
    client: TestClient, workspace_root: Path
) -> None:
    check = _Checked(client)
    run = {"run_id": "schemas"}
    write = body("fs.write_file", {"path": "s.txt", "content": "x"}, **run)
    done = check("POST", "/v1/executions", json=write)
    assert done["status"] == "completed"
    check("GET", "/v1/executions/{execution_id}", execution_id=done["id"])
    check("GET", "/v1/executions/{execution_id}/events", execution_id=done["id"])
    check("GET", "/v1/runs/{run_id}/events", run_id="schemas")
    check("GET", "/v1/executions", params={"run_id": "schemas"})
    check("GET", "/v1/executions/{execution_id}", execution_id="ex_nope")  # a Problem
    check(
        "GET",
        "/v1/executions/{execution_id}/events",
        execution_id=done["id"],
        params={"after": "x"},
    )
    check("POST", "/v1/plans", json=body("fs.write_file", {"path": "p.txt", "content": "y"}))
    check("GET", "/v1/tools")
    check("GET", "/v1/tools", params={"format": "openai"})
    check("GET", "/v1/tools/{name}", name="fs.write_file")
    check("GET", "/v1/tools/{name}", name="fs.write_file", params={"version": "1.0.0"})
    (workspace_root / "doomed.txt").write_text("bye")
    delete = body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="schemas-1")
    parked = check("POST", "/v1/executions", json=delete)
    assert parked["status"] == "awaiting_approval"
    approval_id = parked["approval"]["id"]
    check("GET", "/v1/approvals", key=BOB, params={"status": "pending"})
    check("GET", "/v1/approvals/{approval_id}", key=BOB, approval_id=approval_id)
    check("POST", "/v1/approvals/{approval_id}/deny", key=BOB, approval_id=approval_id)
    check("POST", "/v1/approvals/{approval_id}/deny", key=BOB, approval_id=approval_id)  # 409
    check("POST", "/v1/cancellations", json={"cancellation_token": "none"})
    check("POST", "/v1/executions/{execution_id}/cancel", execution_id=done["id"])  # 409
    check("GET", "/healthz")
    check("GET", "/readyz")
    assert len(check.checked) == 21, check.checked  # every request above was checked
