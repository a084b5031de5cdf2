"""Every bad input gets a clear error and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.server.conftest import auth, body


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.mark.parametrize(
    "raw, code",
    [
        (b"{not json", "malformed_json"),
        (b"[1, 2]", "malformed_request"),
        (b'{"run_id": "r"}', "invalid_request"),
    ],
)
def test_malformed_bodies(client: TestClient, raw: bytes, code: str, workspace_root: Path) -> None:
    response = client.post(
        "/v1/executions", content=raw, headers={**auth(), "Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == code
    assert "Traceback" not in response.text
    assert _files(workspace_root) == []


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda b: b.update(run_id=5), "run_id"),
        (lambda b: b.update(arguments="x"), "arguments"),
        (lambda b: b.update(deadline="soon"), "deadline"),
        (lambda b: b.update(unexpected=True), "unexpected"),
        (lambda b: b["tool"].pop("name"), "tool.name"),
    ],
)
def test_wrong_types_name_the_field(client: TestClient, mutate, field: str) -> None:  # type: ignore[no-untyped-def]
    payload = body("fs.write_file", {"path": "a.txt", "content": "x"})
    mutate(payload)
    response = client.post("/v1/executions", json=payload, headers=auth())
    assert response.status_code == 400
    assert field in response.json()["detail"]


def test_wrong_content_type(client: TestClient) -> None:
    response = client.post(
        "/v1/executions",
        content=b"a=b",
        headers={**auth(), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


def test_body_over_limit_is_413_before_parsing(client: TestClient, workspace_root: Path) -> None:
    big = body("fs.write_file", {"path": "big.txt", "content": "x" * (1024 * 1024 + 10)})
    response = client.post("/v1/executions", json=big, headers=auth())
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert _files(workspace_root) == []


@pytest.mark.parametrize(
    "headers, code",
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Basic abc"}, "bad_authorization"),
        ({"Authorization": "Bearer wrong"}, "invalid_api_key"),
    ],
)
def test_auth_is_required(client: TestClient, headers: dict[str, str], code: str) -> None:
    for method, url in [("POST", "/v1/executions"), ("GET", "/v1/tools"), ("GET", "/openapi.json")]:
        response = client.request(method, url, headers=headers, json={})
        assert response.status_code == 401, url
        assert response.json()["code"] == code
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_health_probes_are_open(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["store"] == "ok"


def test_actor_must_be_the_principal(client: TestClient, workspace_root: Path) -> None:
    payload = body("fs.write_file", {"path": "a.txt", "content": "x"})
    payload["actor"]["user_id"] = "bob"
    response = client.post("/v1/executions", json=payload, headers=auth())
    assert response.status_code == 403
    assert response.json()["code"] == "actor_mismatch"
    assert _files(workspace_root) == []


def test_unknown_tool_is_a_failed_execution_in_resolve(client: TestClient) -> None:
    response = client.post("/v1/executions", json=body("fs.nope", {}), headers=auth())
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["outcome"] == "failed"
    assert result["error"]["phase"] == "resolve"
    assert result["error"]["type"] == "tool_not_found"
    assert result["side_effect"]["attempted"] is False


@pytest.mark.parametrize(
    "arguments, code",
    [
        ({"path": "a.txt"}, "invalid_arguments"),
        ({"path": "a.txt", "content": 5}, "invalid_arguments"),
        ({"path": "a.txt", "content": "x", "extra": 1}, "invalid_arguments"),
        ({"path": "/etc/passwd", "content": "x"}, "path_escape"),
        ({"path": "../../x", "content": "x"}, "path_escape"),
        ({"path": "a\u0000b", "content": "x"}, "invalid_path"),
    ],
)
def test_bad_arguments_fail_at_validate(
    client: TestClient,
    arguments: dict,
    code: str,
    workspace_root: Path,  # type: ignore[type-arg]
) -> None:
    result = client.post(
        "/v1/executions", json=body("fs.write_file", arguments), headers=auth()
    ).json()["result"]
    assert result["outcome"] == "failed"
    assert result["error"]["phase"] == "validate"
    assert result["error"]["type"] == code
    assert "Traceback" not in result["error"]["message"]
    assert _files(workspace_root) == []


def test_unknown_workspace(client: TestClient) -> None:
    payload = body("fs.write_file", {"path": "a.txt", "content": "x"})
    payload["workspace"] = {"id": "nowhere"}
    result = client.post("/v1/executions", json=payload, headers=auth()).json()["result"]
    assert result["error"]["type"] == "unknown_workspace"


def test_caller_sent_root_must_match(client: TestClient) -> None:
    payload = body("fs.write_file", {"path": "a.txt", "content": "x"})
    payload["workspace"] = {"id": "demo", "root": "/tmp"}
    result = client.post("/v1/executions", json=payload, headers=auth()).json()["result"]
    assert result["error"]["type"] == "workspace_root_mismatch"
