"""Every bad input gets a clear error and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.jsonlimits import JsonLimits
from gateway.server.app import create_app
from gateway.settings import Settings
from tests.server.helpers import auth, body


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


# --- hostile JSON (issue 12 §4) -----------------------------------------------------------


def _raw(arguments: str = '{"path": "a.txt", "content": "x"}', **fields: str) -> bytes:
    """An execution body written by hand (as text: some of these cannot be built as dicts)."""
    parts = {
        "run_id": '"r-hostile"',
        "call_id": '"c1"',
        "tool": '{"name": "fs.write_file"}',
        "arguments": arguments,
        "workspace": '{"id": "demo"}',
        **fields,
    }
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in parts.items()) + "}").encode()


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


DEEP, MANY = "json_too_deep", "json_too_many_values"
BAD, REQ = "malformed_json", "invalid_request"
HOSTILE = {
    "body 10,000 deep": (_deep(10_000).encode(), DEEP),
    "arguments 100,000 deep": (_raw('{"path": "a", "x": ' + _deep(10**5) + "}"), DEEP),
    "arguments 990 deep": (_raw('{"path": "a", "content": ' + _deep(990) + "}"), DEEP),
    "unknown argument 600 deep": (_raw('{"path": "a", "u": ' + _deep(600) + "}"), DEEP),
    "expected_state 990 deep": (_raw(expected_state='{"sha256": ' + _deep(990) + "}"), DEEP),
    "lone surrogate in path": (_raw('{"path": "a\\ud800.txt", "content": "x"}'), BAD),
    "lone surrogate in a key": (_raw('{"path": "a", "content": "x", "\\udc00": 1}'), BAD),
    "deadline 10^400": (_raw(deadline="1" + "0" * 400), REQ),
    "number 1e400": (_raw('{"path": "a", "content": 1e400}'), BAD),
    "NaN": (_raw('{"path": "a", "content": NaN}'), BAD),
    "duplicate key": (_raw('{"path": "a", "path": "b.txt", "content": "x"}'), BAD),
    "duplicate body key": (_raw(run_id='"r1", "run_id": "r2"'), BAD),
    "too many values": (_raw("{" + ", ".join(f'"a{i}": {i}' for i in range(10_001)) + "}"), MANY),
    "too many values around the arguments": (
        _raw(expected_state='{"sha256": [' + "0, " * 10_000 + "0]}"), MANY
    ),
    "control character in run_id": (_raw(run_id='"r\\u001b[2J"'), REQ),
    "newline in call_id": (_raw(call_id='"c\\n1"'), REQ),
    "newline ending call_id": (_raw(call_id='"c1\\n"'), REQ),
    "control character in agent_id": (_raw(actor='{"agent_id": "a\\u0000"}'), REQ),
    "control character in user_id": (_raw(actor='{"user_id": "alice\\u0000"}'), REQ),
    "control character in workspace.id": (_raw(workspace='{"id": "demo\\u0085"}'), REQ),
    "right-to-left override in run_id": (_raw(run_id='"r\\u202etxt.exe"'), REQ),
    "left-to-right isolate in call_id": (_raw(call_id='"c\\u20661"'), REQ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_json_is_a_400_and_runs_nothing(
    client: TestClient, name: str, workspace_root: Path
) -> None:
    raw, code = HOSTILE[name]
    response = client.post(
        "/v1/executions", content=raw, headers={**auth(), "Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text[:500]
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code
    assert "Traceback" not in response.text
    assert _files(workspace_root) == []
    listed = client.get("/v1/executions", headers=auth()).json()
    assert listed["count"] == 0


def test_a_control_character_is_named_as_such(client: TestClient) -> None:
    response = client.post(
        "/v1/executions",
        content=_raw(turn_id='"t\\u001b"'),
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors == [
        {"field": "turn_id", "problem": "Value error, must not contain control characters"}
    ]


def test_hostile_bodies_are_refused_on_every_route(client: TestClient) -> None:
    for url in ("/v1/cancellations", "/v1/approvals/ap_x/approve"):
        response = client.post(
            url,
            content=_deep(5000).encode(),
            headers={**auth(), "Content-Type": "application/json"},
        )
        assert response.status_code == 400, (url, response.text)
        assert response.json()["code"] == "json_too_deep"


def test_a_long_idempotency_key_header_is_refused(client: TestClient) -> None:
    payload = body("fs.write_file", {"path": "a.txt", "content": "x"})
    for key in ("k" * 10 * 1024, "k" * 257):
        response = client.post(
            "/v1/executions", json=payload, headers={**auth(), "Idempotency-Key": key}
        )
        assert response.status_code == 400
        assert response.json()["code"] == "invalid_request"
    headers = {**auth(), "Idempotency-Key": "k" * 256}
    ok = client.post("/v1/executions", json=payload, headers=headers)
    assert ok.status_code == 200, ok.text


def test_actor_without_user_id_is_the_principal(client: TestClient, workspace_root: Path) -> None:
    payload = body("fs.write_file", {"path": "a.txt", "content": "x"})
    payload["actor"] = {"agent_id": "x"}
    response = client.post("/v1/executions", json=payload, headers=auth())
    assert response.status_code == 200, response.text
    assert response.json()["actor"] == {"user_id": "alice", "agent_id": "x"}
    assert (workspace_root / "a.txt").read_text() == "x"


def test_a_refused_body_never_reaches_the_validator(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.declarations.fastvalid import FastValidator

    def boom(self: FastValidator, document: object, *args: object, **kwargs: object) -> bool:
        raise AssertionError("the validator ran")

    monkeypatch.setattr(FastValidator, "validate", boom)
    arguments = {"path": "k.txt", "content": "x", **{f"a{i}": i for i in range(40_000)}}
    response = client.post("/v1/executions", json=body("fs.write_file", arguments), headers=auth())
    assert response.status_code == 400
    assert response.json()["code"] == "json_too_many_values"


def test_arguments_are_bounded_on_their_own_not_with_the_body_around_them(
    client: TestClient,
) -> None:
    # the REST door counted the whole body: these arguments, which MCP took, were refused
    bound = JsonLimits().max_values
    arguments = {"path": "k.txt", "content": "x", "items": [0] * (bound - 3)}
    response = client.post("/v1/executions", json=body("fs.write_file", arguments), headers=auth())
    assert response.json()["result"]["error"]["errors"] == {"items": ["unknown field"]}


def test_retry_after_only_where_a_retry_can_help(client: TestClient) -> None:
    first = body("fs.write_file", {"path": "a.txt", "content": "x"})
    assert client.post("/v1/executions", json=first, headers=auth()).status_code == 200
    reused = {**first, "arguments": {"path": "b.txt", "content": "y"}}
    response = client.post("/v1/executions", json=reused, headers=auth())
    assert response.status_code == 409 and response.json()["code"] == "call_id_reused"
    assert "retry-after" not in response.headers


def test_a_chunked_approve_body_is_read_and_checked(
    client: TestClient, workspace_root: Path
) -> None:
    from tests.helpers import BOB

    (workspace_root / "doomed.txt").write_text("bye")
    payload = body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="del-chunked")
    parked = client.post("/v1/executions", json=payload, headers=auth()).json()
    url = f"/v1/approvals/{parked['approval']['id']}/approve"

    def chunks() -> Iterator[bytes]:
        yield b'{"bogus": 1, '
        yield b'"resume": false}'

    headers = {**auth(BOB), "Content-Type": "application/json"}
    refused = client.post(url, content=chunks(), headers=headers)
    assert refused.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in refused.request.headers
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "invalid_request"
    assert (
        client.get(f"/v1/approvals/{parked['approval']['id']}", headers=auth()).json()["status"]
        == "pending"
    )
    assert (workspace_root / "doomed.txt").exists()

    def token_please() -> Iterator[bytes]:
        yield b'{"resume": '
        yield b"false}"

    decided = client.post(url, content=token_please(), headers=headers)
    assert decided.status_code == 200, decided.text  # a token, not a resumed call
    assert "approval_token" in decided.json()
    assert (workspace_root / "doomed.txt").exists()


def test_a_regex_on_a_path_sees_the_normalised_path(settings: Settings, project: Path) -> None:
    source = (project / "tools.d" / "fs.read_file.yaml").read_text()
    narrowed = source.replace("name: fs.read_file", "name: docs.read").replace(
        "maxlength: 4096}", "maxlength: 4096, regex: 'docs/[a-z]+\\.md'}"
    )
    (project / "tools.d" / "docs.read.yaml").write_text(narrowed)
    root = project / "var" / "workspaces" / "demo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "x.md").write_text("hello")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for spelling in ("docs/x.md", "./docs/x.md", "docs//./x.md"):
            response = client.post(
                "/v1/executions", json=body("docs.read", {"path": spelling}), headers=auth()
            )
            result = response.json()["result"]
            assert result["outcome"] == "succeeded", (spelling, result)
            assert result["data"]["content"] == "hello"
        refused = client.post(
            "/v1/executions", json=body("docs.read", {"path": "x.md"}), headers=auth()
        ).json()["result"]
        assert refused["error"]["type"] == "invalid_arguments"
        assert "path" in refused["error"]["errors"]
