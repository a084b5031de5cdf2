"""A request's identity: which answer a repeated ``(run_id, call_id)`` or idempotency key gets.

The order is documented in docs/api.md ("Which answer comes first"): the call identity
answers first, then the idempotency key. Every path a call can take is covered (an ephemeral
read, a reserved write, a call rejected before reservation, a call parked for approval, an
asynchronous call, a replay), on SQLite and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.helpers import BOB
from tests.server.helpers import auth, body


def _post(client: TestClient, payload: dict[str, Any], **headers: str) -> Any:
    return client.post("/v1/executions", json=payload, headers={**auth(), **headers})


def _same_call(payload: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**payload, **changes}


def _refused_as_reused(response: Any, first_id: str) -> None:
    assert response.status_code == 409, response.text
    problem = response.json()
    assert problem["code"] == "call_id_reused"
    assert problem["execution_id"] == first_id


@pytest.fixture
def notes(workspace_root: Path) -> Path:
    for name, text in (("a.txt", "content of a"), ("b.txt", "content of b")):
        (workspace_root / name).write_text(text)
    (workspace_root / "doomed.txt").write_text("bye")
    return workspace_root


def test_a_read_with_a_reused_call_id_is_refused_not_answered_with_the_first(
    client: TestClient, notes: Path
) -> None:
    payload = body("fs.read_file", {"path": "a.txt"})
    first = _post(client, payload)
    assert first.status_code == 200, first.text
    reused = _post(client, _same_call(payload, arguments={"path": "b.txt"}))
    _refused_as_reused(reused, first.json()["id"])
    assert "content of a" not in reused.text


def test_a_read_resent_identically_returns_the_first_execution(
    client: TestClient, notes: Path
) -> None:
    payload = body("fs.read_file", {"path": "a.txt"})
    first = _post(client, payload).json()
    again = _post(client, payload)
    assert again.status_code == 200
    assert again.json()["id"] == first["id"]
    assert again.json()["result"]["data"]["content"] == "content of a"


def test_another_tool_under_a_used_call_id_is_refused(client: TestClient, notes: Path) -> None:
    write = body("fs.write_file", {"path": "w.txt", "content": "x"})
    first = _post(client, write).json()
    read = _same_call(write, tool={"name": "fs.read_file"}, arguments={"path": "a.txt"})
    _refused_as_reused(_post(client, read), first["id"])


def test_a_rejected_call_under_a_used_call_id_is_refused(client: TestClient, notes: Path) -> None:
    payload = body("fs.read_file", {"path": "a.txt"})
    first = _post(client, payload).json()
    invalid = _same_call(payload, arguments={"path": "a.txt", "bogus": 1})
    _refused_as_reused(_post(client, invalid), first["id"])
    unknown_tool = _same_call(payload, tool={"name": "no.such_tool"})
    _refused_as_reused(_post(client, unknown_tool), first["id"])


def test_a_parked_call_resent_identically_returns_it_as_it_stands(
    client: TestClient, notes: Path
) -> None:
    payload = body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="park-1")
    parked = _post(client, payload)
    assert parked.status_code == 202, parked.text
    assert parked.json()["status"] == "awaiting_approval"
    again = _post(client, payload)
    assert again.status_code == 202, again.text
    assert again.json()["id"] == parked.json()["id"]
    assert again.json()["status"] == "awaiting_approval"
    assert again.json()["approval"]["id"] == parked.json()["approval"]["id"]
    changed = _same_call(payload, arguments={"path": "a.txt"})
    _refused_as_reused(_post(client, changed), parked.json()["id"])
    pending = client.get("/v1/approvals?status=pending", headers=auth(BOB)).json()["items"]
    assert [a["id"] for a in pending] == [parked.json()["approval"]["id"]]


def test_an_async_call_resent_returns_it_and_a_changed_one_is_refused(
    client: TestClient, notes: Path
) -> None:
    payload = body("fs.write_file", {"path": "q.txt", "content": "1"}, idempotency_key="q-1")
    queued = _post(client, payload, Prefer="respond-async")
    assert queued.status_code == 202, queued.text
    done = client.get(queued.json()["links"]["self"] + "?wait=10", headers=auth()).json()
    assert done["status"] == "completed", done  # a replay of a completed call: 200, as it is
    again = _post(client, payload, Prefer="respond-async")
    assert again.status_code == 200 and again.json()["id"] == queued.json()["id"], again.text
    changed = _same_call(payload, arguments={"path": "q.txt", "content": "2"})
    _refused_as_reused(_post(client, changed, Prefer="respond-async"), queued.json()["id"])


def test_the_call_identity_answers_before_the_idempotency_key(
    client: TestClient, notes: Path
) -> None:
    """Every combination of the table in docs/api.md, in one run."""
    args = {"path": "k.txt", "content": "one"}
    first_payload = body("fs.write_file", args, idempotency_key="k-1")
    first = _post(client, first_payload)
    assert first.status_code == 200, first.text
    first_id = first.json()["id"]

    # same call, same payload (and key): the first execution
    same = _post(client, first_payload)
    assert same.status_code == 200 and same.json()["id"] == first_id
    # same call, other arguments, same key: the call_id answers, not the key
    other_args = _same_call(first_payload, arguments={"path": "k.txt", "content": "two"})
    _refused_as_reused(_post(client, other_args), first_id)
    # same call, same arguments, another key: another request
    _refused_as_reused(_post(client, _same_call(first_payload, idempotency_key="k-2")), first_id)
    # same call, other arguments, no key
    no_key = _same_call(first_payload, arguments={"path": "k.txt", "content": "two"})
    del no_key["idempotency_key"]
    _refused_as_reused(_post(client, no_key), first_id)
    # new call, same key, same arguments: a replay of the first
    replay = _post(client, body("fs.write_file", args, idempotency_key="k-1"))
    assert replay.status_code == 200 and replay.json()["id"] == first_id
    # new call, same key, other arguments: the key's 422
    mismatch = _post(
        client, body("fs.write_file", {**args, "content": "two"}, idempotency_key="k-1")
    )
    assert mismatch.status_code == 422 and mismatch.json()["code"] == "idempotency_key_reused"
    # new call, new key: a new execution
    fresh = _post(client, body("fs.write_file", args, idempotency_key="k-3"))
    assert fresh.status_code == 200 and fresh.json()["id"] != first_id


def test_a_new_call_with_the_key_of_a_parked_call_is_in_flight(
    client: TestClient, notes: Path
) -> None:
    parked = _post(client, body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="pk"))
    assert parked.status_code == 202, parked.text
    other_call = _post(client, body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="pk"))
    assert other_call.status_code == 409, other_call.text
    assert other_call.json()["code"] == "idempotency_key_in_flight"
    changed = _post(client, body("fs.delete_file", {"path": "a.txt"}, idempotency_key="pk"))
    assert changed.status_code == 422 and changed.json()["code"] == "idempotency_key_reused"
