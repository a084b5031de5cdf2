"""Edit before approve through the HTTP API: the approver changes editable arguments, the
edited call is checked again, the approval binds it, and the file on disk is the edited one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.pipeline.records import sha256_json
from gateway.server.app import create_app
from gateway.settings import Settings
from tests.helpers import BOB, CAROL, REVIEWED_TOOL
from tests.server.helpers import auth, body


@pytest.fixture
def client(project: Path, settings: Settings) -> Iterator[TestClient]:
    (project / "tools.d" / "fs.write_reviewed.yaml").write_text(REVIEWED_TOOL)
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def _park(client: TestClient, key: str | None = None, **arguments: Any) -> dict[str, Any]:
    payload = body("fs.write_reviewed", {"path": "notes.txt", "content": "draft", **arguments})
    if key == CAROL:
        payload["actor"] = {"user_id": "carol", "agent_id": "x"}
    response = client.post("/v1/executions", json=payload, headers=auth(key or "tg_dev_alice"))
    assert response.status_code == 202, response.text
    return dict(response.json())


def _approve(client: TestClient, parked: dict[str, Any], **decision: Any) -> Any:
    return client.post(
        f"/v1/approvals/{parked['approval']['id']}/approve", json=decision, headers=auth(BOB)
    )


def _events(client: TestClient, parked: dict[str, Any]) -> list[dict[str, Any]]:
    return list(client.get(parked["links"]["events"], headers=auth()).json()["items"])


def _unchanged(client: TestClient, parked: dict[str, Any], root: Path) -> None:
    """Nothing was decided or written: the approval is pending with its first arguments."""
    approval = client.get(parked["links"]["approval"], headers=auth(BOB)).json()
    assert approval["status"] == "pending", approval
    assert approval["arguments"] == {"path": "notes.txt", "content": "draft", "create_dirs": True}
    execution = client.get(parked["links"]["self"], headers=auth()).json()
    assert execution["status"] == "awaiting_approval"
    assert "approval.edited" not in [e["type"] for e in _events(client, parked)]
    assert not any(root.iterdir()), list(root.iterdir())


def test_the_edited_call_is_what_runs(client: TestClient, workspace_root: Path) -> None:
    parked = _park(client)
    edits = {"path": "docs/notes.md", "content": "reviewed by bob\n"}
    decided = _approve(client, parked, arguments=edits, comment="fixed the path")
    assert decided.status_code == 202, decided.text
    edited = {**edits, "create_dirs": True}
    assert decided.json()["arguments"] == edited
    assert decided.json()["arguments_sha256"] == sha256_json(edited)
    done = client.get(parked["links"]["self"] + "?wait=10", headers=auth()).json()
    assert done["result"]["outcome"] == "succeeded", done["result"]
    assert (workspace_root / "docs" / "notes.md").read_text() == "reviewed by bob\n"
    assert not (workspace_root / "notes.txt").exists()
    events = _events(client, parked)
    (edit,) = [e["data"] for e in events if e["type"] == "approval.edited"]
    assert edit["edited_by"] == "bob" and edit["changed"] == ["content", "path"]
    assert edit["original"]["arguments"]["content"] == "draft"
    first = {"path": "notes.txt", "content": "draft", "create_dirs": True}
    assert edit["original"] == {
        "arguments": first,
        "arguments_sha256": sha256_json(first),
        "truncated": False,
    }
    assert edit["edited"]["arguments"] == edited
    assert edit["edited"]["arguments_sha256"] == sha256_json(edited)
    # The resumed call was decided by the policy again, on the edited arguments.
    decisions = [e["data"] for e in events if e["type"] == "policy.decided"]
    assert decisions[-1]["input"]["arguments"] == edited
    assert decisions[-1]["input"]["approval"] == {"present": True, "approved_by": "bob"}


def test_a_non_editable_argument_is_refused(client: TestClient, workspace_root: Path) -> None:
    parked = _park(client)
    refused = _approve(client, parked, arguments={"content": "x", "create_dirs": False})
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["code"] == "argument_not_editable"
    assert problem["arguments"] == ["create_dirs"] and problem["editable"] == ["path", "content"]
    _unchanged(client, parked, workspace_root)
    # Sending an argument back unchanged is not an edit: the whole object may be sent.
    same = {"path": "notes.txt", "content": "final", "create_dirs": True}
    assert _approve(client, parked, arguments=same).status_code == 202
    done = client.get(parked["links"]["self"] + "?wait=10", headers=auth()).json()
    assert done["result"]["outcome"] == "succeeded", done["result"]
    assert (workspace_root / "notes.txt").read_text() == "final"


@pytest.mark.parametrize(
    ("edits", "cause"),
    [
        ({"content": 42}, "invalid_arguments"),  # the input schema
        ({"path": "../outside.txt"}, "path_escape"),  # path confinement
        ({"path": ".git/config"}, "policy_denied"),  # the policy: a protected path
    ],
)
def test_an_edit_the_call_would_fail_on_is_refused(
    client: TestClient, workspace_root: Path, edits: dict[str, Any], cause: str
) -> None:
    parked = _park(client)
    refused = _approve(client, parked, arguments=edits)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["code"] == "edit_refused", problem
    assert problem["error"]["type"] == cause, problem
    if cause == "policy_denied":
        assert "protected path" in problem["error"]["reasons"][0]
    _unchanged(client, parked, workspace_root)


def test_edits_only_approve_and_never_their_own(client: TestClient, workspace_root: Path) -> None:
    parked = _park(client)
    denied = client.post(
        f"/v1/approvals/{parked['approval']['id']}/deny",
        json={"arguments": {"content": "x"}},
        headers=auth(BOB),
    )
    assert denied.status_code == 400 and denied.json()["code"] == "invalid_request", denied.text
    shape = _approve(client, parked, arguments=["content"])
    assert shape.status_code == 400 and shape.json()["code"] == "invalid_request"
    _unchanged(client, parked, workspace_root)
    own = _park(client, CAROL)
    self_edit = client.post(
        f"/v1/approvals/{own['approval']['id']}/approve",
        json={"arguments": {"content": "mine"}},
        headers=auth(CAROL),
    )
    assert self_edit.status_code == 403 and self_edit.json()["code"] == "self_approval"


def test_a_token_binds_the_edited_arguments(client: TestClient, workspace_root: Path) -> None:
    parked = _park(client)
    decided = _approve(client, parked, arguments={"content": "edited"}, resume=False)
    assert decided.status_code == 200, decided.text
    token = decided.json()["approval_token"]
    original = body("fs.write_reviewed", {"path": "notes.txt", "content": "draft"})
    refused = client.post(
        "/v1/executions", json={**original, "approval_token": token}, headers=auth()
    ).json()
    assert refused["result"]["error"]["type"] == "approval_token_invalid", refused["result"]
    assert "other arguments" in refused["result"]["error"]["message"]
    edited = body("fs.write_reviewed", {"path": "notes.txt", "content": "edited"})
    done = client.post(
        "/v1/executions", json={**edited, "approval_token": token}, headers=auth()
    ).json()
    assert done["result"]["outcome"] == "succeeded", done["result"]
    assert (workspace_root / "notes.txt").read_text() == "edited"
