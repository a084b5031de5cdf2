"""Prefer: respond-async, long-polling, cancel and cancellation tokens through the API."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from tests.conftest import BOB
from tests.server.conftest import auth, body


def test_respond_async_then_long_poll(client: TestClient, workspace_root: Path) -> None:
    payload = body("fs.write_file", {"path": "async.txt", "content": "later"})
    response = client.post(
        "/v1/executions", json=payload, headers={**auth(), "Prefer": "respond-async"}
    )
    assert response.status_code == 202, response.text
    assert response.json()["status"] in ("queued", "running")
    assert response.json()["result"] is None
    done = client.get(response.json()["links"]["self"] + "?wait=10", headers=auth())
    assert done.status_code == 200
    assert done.json()["result"]["outcome"] == "succeeded"
    assert (workspace_root / "async.txt").read_text() == "later"
    types = [
        e["type"]
        for e in client.get(done.json()["links"]["events"], headers=auth()).json()["items"]
    ]
    assert types.count("tool.started") == 1


def test_bad_wait_is_400(client: TestClient) -> None:
    created = client.post("/v1/executions", json=body("fs.list_dir", {}), headers=auth()).json()
    for bad in ("soon", "-1", "3600"):
        response = client.get(created["links"]["self"] + f"?wait={bad}", headers=auth())
        assert response.status_code == 400 and response.json()["code"] == "invalid_wait"


def test_cancel_a_parked_call(client: TestClient, workspace_root: Path) -> None:
    (workspace_root / "keep.txt").write_text("k")
    parked = client.post(
        "/v1/executions",
        json=body(
            "fs.delete_file", {"path": "keep.txt"}, idempotency_key="c1", cancellation_token="tok"
        ),
        headers=auth(),
    ).json()
    assert parked["status"] == "awaiting_approval"
    cancelled = client.post("/v1/cancellations", json={"cancellation_token": "tok"}, headers=auth())
    assert cancelled.status_code == 202
    item = cancelled.json()["items"][0]
    assert item["status"] == "completed" and item["result"]["outcome"] == "cancelled"
    late = client.post(f"/v1/approvals/{parked['approval']['id']}/approve", headers=auth(BOB))
    assert late.status_code == 409 and late.json()["code"] == "approval_moot"
    again = client.get(parked["links"]["self"] + "?wait=1", headers=auth()).json()
    assert again["result"]["outcome"] == "cancelled"
    assert (workspace_root / "keep.txt").exists()
    done = client.post(parked["links"]["self"] + "/cancel", headers=auth())
    assert done.status_code == 409 and done.json()["code"] == "already_completed"


def test_resolve_needs_an_unknown_outcome_and_an_approver(client: TestClient) -> None:
    created = client.post(
        "/v1/executions",
        json=body("fs.write_file", {"path": "r.txt", "content": "x"}),
        headers=auth(),
    ).json()
    url = created["links"]["self"] + "/resolve"
    forbidden = client.post(url, json={"outcome": "failed", "note": "n"}, headers=auth())
    assert forbidden.status_code == 403
    conflict = client.post(url, json={"outcome": "failed", "note": "n"}, headers=auth(BOB))
    assert conflict.status_code == 409 and conflict.json()["code"] == "not_unknown"
