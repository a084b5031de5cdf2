"""The HTTP API end to end, on the real file adapter, embedded Rego and SQLite/PostgreSQL."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from starlette.testclient import TestClient

from tests.helpers import BOB
from tests.server.helpers import auth, body


def _post(client: TestClient, payload: dict, key: str | None = None, **kw) -> object:  # type: ignore[type-arg]
    return client.post("/v1/executions", json=payload, headers=auth(key) if key else auth(), **kw)


def test_write_file_succeeds_with_evidence_and_file_on_disk(
    client: TestClient, workspace_root: Path
) -> None:
    response = _post(client, body("fs.write_file", {"path": "notes/a.txt", "content": "hi"}))
    assert response.status_code == 200, response.text
    execution = response.json()
    assert execution["status"] == "completed"
    result = execution["result"]
    assert result["outcome"] == "succeeded", result
    assert result["error"] is None
    assert result["tool_version"] == "1.2.0"
    digest = hashlib.sha256(b"hi").hexdigest()
    hashes = [e for e in result["evidence"] if e["kind"] == "file_hash"]
    assert hashes and hashes[0]["sha256"] == digest
    verify = [e for e in result["evidence"] if e["kind"] == "probe"]
    assert verify and verify[0]["passed"] is True
    assert (workspace_root / "notes" / "a.txt").read_text() == "hi"
    assert result["side_effect"] == {
        "attempted": True,
        "committed": True,
        "summary": "wrote notes/a.txt (2 bytes)",
    }


def test_get_execution_and_events_tell_the_story(client: TestClient) -> None:
    created = _post(client, body("fs.write_file", {"path": "b.txt", "content": "x"})).json()
    again = client.get(created["links"]["self"], headers=auth())
    assert again.status_code == 200
    assert again.json()["result"] == created["result"]
    events = client.get(created["links"]["events"], headers=auth()).json()["items"]
    types = [e["type"] for e in events]
    assert types[0] == "tool.requested"
    assert types[-1] == "tool.completed"
    for expected in ("tool.resolved", "policy.decided", "lock.acquired", "tool.started"):
        assert expected in types
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert len({e["id"] for e in events}) == len(events)


def test_read_file_returns_content(client: TestClient, workspace_root: Path) -> None:
    (workspace_root / "r.txt").write_text("hello")
    result = _post(client, body("fs.read_file", {"path": "./r.txt"})).json()["result"]
    assert result["outcome"] == "succeeded"
    assert result["data"]["content"] == "hello"
    assert result["data"]["path"] == "r.txt"
    assert result["side_effect"]["attempted"] is False


def test_same_call_id_same_payload_returns_first_execution(client: TestClient) -> None:
    payload = body("fs.write_file", {"path": "c.txt", "content": "1"})
    first = _post(client, payload).json()
    second = _post(client, payload).json()
    assert second["id"] == first["id"]
    changed = dict(payload, arguments={"path": "c.txt", "content": "2"})
    conflict = _post(client, changed)
    assert conflict.status_code == 409
    assert conflict.headers["content-type"] == "application/problem+json"
    assert conflict.json()["code"] == "call_id_reused"


def test_idempotent_replay_does_not_write_again(client: TestClient, workspace_root: Path) -> None:
    first = _post(
        client, body("fs.write_file", {"path": "i.txt", "content": "one"}, idempotency_key="k1")
    )
    target = workspace_root / "i.txt"
    target.write_text("changed by someone else")
    replay = _post(
        client, body("fs.write_file", {"path": "i.txt", "content": "one"}, idempotency_key="k1")
    )
    assert replay.status_code == 200
    assert replay.json()["id"] == first.json()["id"]
    assert replay.json()["result"] == first.json()["result"]
    assert target.read_text() == "changed by someone else"
    mismatch = _post(
        client, body("fs.write_file", {"path": "i.txt", "content": "two"}, idempotency_key="k1")
    )
    assert mismatch.status_code == 422
    assert mismatch.json()["code"] == "idempotency_key_reused"


def test_each_replay_is_noted_on_the_first_executions_log(client: TestClient) -> None:
    args = {"path": "n.txt", "content": "one"}
    first = _post(client, body("fs.write_file", args, idempotency_key="note-1")).json()
    calls = []
    for _ in range(2):
        payload = body("fs.write_file", args, idempotency_key="note-1")
        calls.append(payload["call_id"])
        assert _post(client, payload).json()["id"] == first["id"]
    events = client.get(f"/v1/executions/{first['id']}/events", headers=auth()).json()["items"]
    notes = [e for e in events if e["type"] == "tool.requested" and e["data"].get("replay")]
    assert [n["data"]["call_id"] for n in notes] == calls
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(len(events)))  # numbered by the store, no gaps
    # A refused replay (different arguments) leaves no note.
    other = body("fs.write_file", {"path": "n.txt", "content": "two"}, idempotency_key="note-1")
    assert _post(client, other).status_code == 422
    again = client.get(f"/v1/executions/{first['id']}/events", headers=auth()).json()["items"]
    assert len(again) == len(events)


def test_idempotency_key_header_must_match_body(client: TestClient) -> None:
    payload = body("fs.write_file", {"path": "h.txt", "content": "1"}, idempotency_key="a")
    response = client.post(
        "/v1/executions", json=payload, headers={**auth(), "Idempotency-Key": "b"}
    )
    assert response.status_code == 400
    assert response.json()["code"] == "idempotency_key_conflict"


def test_delete_requires_approval_and_touches_nothing(
    client: TestClient, workspace_root: Path
) -> None:
    target = workspace_root / "keep.txt"
    target.write_text("precious")
    response = _post(client, body("fs.delete_file", {"path": "keep.txt"}, idempotency_key="d1"))
    assert response.status_code == 202, response.text
    execution = response.json()
    assert execution["status"] == "awaiting_approval"
    assert execution["result"] is None
    assert execution["approval"]["id"].startswith("ap_")
    assert execution["approval"]["reasons"]
    assert target.read_text() == "precious"
    pending = client.get("/v1/approvals?status=pending", headers=auth(BOB)).json()["items"]
    assert execution["approval"]["id"] in [a["id"] for a in pending]
    assert client.get("/v1/approvals", headers=auth()).status_code == 403


def test_delete_without_idempotency_key_is_400(client: TestClient) -> None:
    response = _post(client, body("fs.delete_file", {"path": "x.txt"}))
    assert response.status_code == 400
    assert response.json()["code"] == "idempotency_key_required"


def test_compare_and_swap_guard(client: TestClient, workspace_root: Path) -> None:
    target = workspace_root / "cas.txt"
    target.write_text("v1")
    stale = hashlib.sha256(b"v0").hexdigest()
    response = _post(
        client,
        body(
            "fs.write_file", {"path": "cas.txt", "content": "v2"}, expected_state={"sha256": stale}
        ),
    )
    result = response.json()["result"]
    assert result["outcome"] == "failed"
    assert result["error"]["phase"] == "validate"
    assert result["error"]["type"] == "state_mismatch"
    assert target.read_text() == "v1"
    fresh = hashlib.sha256(b"v1").hexdigest()
    ok = _post(
        client,
        body(
            "fs.write_file", {"path": "cas.txt", "content": "v2"}, expected_state={"sha256": fresh}
        ),
    )
    assert ok.json()["result"]["outcome"] == "succeeded"
    assert target.read_text() == "v2"


def test_apply_patch(client: TestClient, workspace_root: Path) -> None:
    (workspace_root / "p.txt").write_text("a\nb\nc\n")
    patch = "--- a/p.txt\n+++ b/p.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    result = _post(client, body("fs.apply_patch", {"path": "p.txt", "patch": patch})).json()[
        "result"
    ]
    assert result["outcome"] == "succeeded", result
    assert (workspace_root / "p.txt").read_text() == "a\nB\nc\n"
    assert any(e["kind"] == "diff" for e in result["evidence"])
    bad = "--- a/p.txt\n+++ b/p.txt\n@@ -1,3 +1,3 @@\n a\n-zzz\n+B\n c\n"
    failed = _post(client, body("fs.apply_patch", {"path": "p.txt", "patch": bad})).json()["result"]
    assert failed["outcome"] == "failed"
    assert failed["error"]["type"] == "patch_does_not_apply"
    assert (workspace_root / "p.txt").read_text() == "a\nB\nc\n"


def test_list_dir(client: TestClient, workspace_root: Path) -> None:
    (workspace_root / "d").mkdir()
    (workspace_root / "d" / "one.txt").write_text("1")
    result = _post(client, body("fs.list_dir", {"path": "d"})).json()["result"]
    assert result["outcome"] == "succeeded"
    assert [e["path"] for e in result["data"]["entries"]] == ["d/one.txt"]


def test_requested_version_range(client: TestClient) -> None:
    payload = body("fs.write_file", {"path": "v.txt", "content": "1"})
    payload["tool"]["requested_version"] = "~1.0"
    result = _post(client, payload).json()["result"]
    assert result["tool_version"] == "1.0.0"
    payload = body("fs.write_file", {"path": "v.txt", "content": "1"})
    payload["tool"]["requested_version"] = "^2"
    failed = _post(client, payload).json()["result"]
    assert failed["outcome"] == "failed"
    assert failed["error"]["phase"] == "resolve"
    assert failed["error"]["type"] == "version_not_found"


def test_expired_deadline_fails_at_validate(client: TestClient, workspace_root: Path) -> None:
    past = int(time.time() * 1000) - 1000
    payload = body("fs.write_file", {"path": "late.txt", "content": "1"}, deadline=past)
    result = _post(client, payload).json()["result"]
    assert result["error"]["type"] == "deadline_exceeded"
    assert not (workspace_root / "late.txt").exists()


def test_list_executions_by_run_and_call(client: TestClient) -> None:
    payload = body("fs.write_file", {"path": "l.txt", "content": "1"}, run_id="run-L")
    created = _post(client, payload).json()
    found = client.get(
        f"/v1/executions?run_id=run-L&call_id={payload['call_id']}", headers=auth()
    ).json()
    assert [item["id"] for item in found["items"]] == [created["id"]]
    others = client.get("/v1/executions?run_id=run-L", headers=auth(BOB)).json()
    assert others["items"] == []


def test_other_principal_cannot_read_an_execution(client: TestClient) -> None:
    created = _post(client, body("fs.write_file", {"path": "o.txt", "content": "1"})).json()
    # carol is no approver's... bob is an approver and may see it; a stranger key may not.
    assert client.get(created["links"]["self"], headers=auth(BOB)).status_code == 200
    assert client.get("/v1/executions/ex_nope", headers=auth()).status_code == 404


def test_symlink_escape_is_refused(
    client: TestClient, workspace_root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    os.symlink(outside, workspace_root / "link.txt")
    result = _post(client, body("fs.write_file", {"path": "link.txt", "content": "pwn"})).json()[
        "result"
    ]
    assert result["outcome"] == "failed"
    assert result["error"]["type"] == "path_escape"
    assert outside.read_text() == "secret"


def test_batch_write_is_partial_when_some_fail(client: TestClient, workspace_root: Path) -> None:
    (workspace_root / "blocked").write_text("a file where a directory is needed")
    files = [
        {"path": "batch/one.txt", "content": "1"},
        {"path": "blocked/two.txt", "content": "2"},
        {"path": "batch/three.txt", "content": "3"},
    ]
    response = _post(client, body("fs.write_files", {"files": files}))
    result = response.json()["result"]
    assert result["outcome"] == "partial", result
    assert [c["path"] for c in result["data"]["committed"]] == ["batch/one.txt", "batch/three.txt"]
    assert [f["path"] for f in result["data"]["failed"]] == ["blocked/two.txt"]
    assert result["side_effect"]["committed"] is True
    assert "retry" in result["side_effect"]["summary"]
    assert len([e for e in result["evidence"] if e["kind"] == "file_hash"]) == 2
    assert (workspace_root / "batch/one.txt").read_text() == "1"
    events = client.get(response.json()["links"]["events"], headers=auth()).json()["items"]
    locks = next(e for e in events if e["type"] == "lock.acquired")["data"]["tokens"]
    assert sorted(locks) == [
        "ws:demo:file:batch/one.txt",
        "ws:demo:file:batch/three.txt",
        "ws:demo:file:blocked/two.txt",
    ]


def test_batch_paths_are_confined(client: TestClient, workspace_root: Path) -> None:
    files = [{"path": "ok.txt", "content": "1"}, {"path": "../escape.txt", "content": "2"}]
    result = _post(client, body("fs.write_files", {"files": files})).json()["result"]
    assert result["outcome"] == "failed" and result["error"]["type"] == "path_escape"
    assert not (workspace_root / "ok.txt").exists()
