"""Prefer: respond-async, long-polling, cancel and cancellation tokens through the API."""

from __future__ import annotations

from pathlib import Path

import anyio
from starlette.testclient import TestClient

from gateway.settings import Settings
from gateway.store.records import LockBusy, LockRequest
from gateway.store.store import Store
from gateway.types import LockMode
from tests.helpers import BOB, wait_until
from tests.server.helpers import auth, body

HOLDER = "ex_lock_holder"


def lock_as(url: str, holder: str, key: str) -> dict[str, int] | LockBusy:
    """One attempt, through the store, to take ``key`` for ``holder`` (held for 10 min)."""

    async def attempt() -> dict[str, int] | LockBusy:
        store = Store(url)
        await store.open()
        try:
            request = LockRequest(key, LockMode.EXCLUSIVE)
            return await store.try_acquire(holder, "holder-call", [request], 600)
        finally:
            await store.aclose()

    return anyio.run(attempt)


def wait_for_status(client: TestClient, url: str, status: str) -> None:
    def reached() -> bool:
        return bool(client.get(url, headers=auth()).json()["status"] == status)

    wait_until(reached, f"{url} to become {status}", limit=30)


def test_respond_async_then_long_poll(client: TestClient, workspace_root: Path) -> None:
    payload = body("fs.write_file", {"path": "async.txt", "content": "later"})
    response = client.post(
        "/v1/executions", json=payload, headers={**auth(), "Prefer": "respond-async"}
    )
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "queued"  # as reserved, whatever a worker did since
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
    assert late.status_code == 409 and late.json()["code"] == "approval_withdrawn"
    approval = client.get(f"/v1/approvals/{parked['approval']['id']}", headers=auth(BOB)).json()
    assert approval["status"] == "withdrawn"
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


def test_cancel_ends_a_lock_wait_while_the_holder_still_holds_it(
    client: TestClient, settings: Settings, workspace_root: Path
) -> None:
    key = "ws:demo:file:locked.txt"
    assert not isinstance(lock_as(settings.database_url, HOLDER, key), LockBusy)
    waiter = client.post(
        "/v1/executions",
        json=body("fs.write_file", {"path": "locked.txt", "content": "never"}),
        headers={**auth(), "Prefer": "respond-async"},
    ).json()
    wait_for_status(client, waiter["links"]["self"], "running")  # a worker took it: it waits
    cancel = client.post(waiter["links"]["self"] + "/cancel", headers=auth())
    # running when asked: the answer is the execution as marked (docs/failures.md, cancel)
    assert (cancel.status_code, cancel.json()["status"]) == (202, "cancelling"), cancel.text
    # Without the cancel ending the wait, this ends lock_timeout at the tool's 10 s timeout.
    done = client.get(waiter["links"]["self"] + "?wait=30", headers=auth()).json()
    assert done["status"] == "completed", done
    result = done["result"]
    assert result["outcome"] == "cancelled" and result["error"]["type"] == "cancelled", result
    assert result["side_effect"]["attempted"] is False
    still = lock_as(settings.database_url, "ex_someone_else", key)
    assert isinstance(still, LockBusy) and still.holder == HOLDER  # never released meanwhile
    assert not (workspace_root / "locked.txt").exists()
