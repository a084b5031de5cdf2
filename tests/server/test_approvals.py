"""Approvals end to end through the HTTP API, on the shipped policy."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from gateway.pipeline.records import sha256_json
from gateway.server.app import create_app
from gateway.settings import Settings
from tests.helpers import ALICE, BOB, CAROL
from tests.server.helpers import auth, body


def _delete(client: TestClient, key: str | None = None, **extra: Any) -> dict[str, Any]:
    payload = body(
        "fs.delete_file", {"path": "doomed.txt"}, **{"idempotency_key": "del-1", **extra}
    )
    if key == CAROL:
        payload["actor"] = {"user_id": "carol", "agent_id": "x"}
    response = client.post("/v1/executions", json=payload, headers=auth(key) if key else auth())
    assert response.status_code == 202, response.text
    return dict(response.json())


def _wait(client: TestClient, execution: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    response = client.get(
        execution["links"]["self"] + "?wait=10", headers=auth(key) if key else auth()
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture
def doomed(workspace_root: Path) -> Path:
    target = workspace_root / "doomed.txt"
    target.write_text("bye")
    return target


def test_approve_resumes_and_deletes_once(client: TestClient, doomed: Path) -> None:
    parked = _delete(client)
    approval_id = parked["approval"]["id"]
    detail = client.get(f"/v1/approvals/{approval_id}", headers=auth(BOB)).json()
    assert detail["tool"] == {"name": "fs.delete_file", "version": "1.0.0"}
    assert detail["arguments"] == {"path": "doomed.txt"}
    assert detail["preview"]["exists"] is True and detail["requested_by"] == "alice"
    assert doomed.exists()
    decided = client.post(
        f"/v1/approvals/{approval_id}/approve", json={"comment": "ok"}, headers=auth(BOB)
    )
    assert decided.status_code == 202, decided.text
    assert decided.json()["status"] == "approved" and "approval_token" not in decided.json()
    done = _wait(client, parked)
    assert done["result"]["outcome"] == "succeeded", done["result"]
    assert not doomed.exists()
    types = [
        e["type"] for e in client.get(parked["links"]["events"], headers=auth()).json()["items"]
    ]
    assert types.count("tool.started") == 1
    assert "approval.requested" in types and "approval.resolved" in types
    again = client.post(f"/v1/approvals/{approval_id}/approve", headers=auth(BOB))
    assert again.status_code == 409 and again.json()["code"] == "approval_used", again.text
    # The same idempotency key now replays the committed result.
    replay = client.post(
        "/v1/executions",
        json=body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="del-1"),
        headers=auth(),
    )
    assert replay.json()["id"] == parked["id"]


def test_deny_changes_nothing(client: TestClient, doomed: Path) -> None:
    parked = _delete(client)
    response = client.post(
        f"/v1/approvals/{parked['approval']['id']}/deny", json={"comment": "no"}, headers=auth(BOB)
    )
    assert response.status_code == 200
    done = _wait(client, parked)
    assert done["result"]["outcome"] == "failed"
    assert done["result"]["error"]["phase"] == "policy"
    assert done["result"]["error"]["type"] == "approval_denied"
    assert "no" in done["result"]["error"]["message"]
    assert doomed.read_text() == "bye"
    again = client.post(f"/v1/approvals/{parked['approval']['id']}/approve", headers=auth(BOB))
    assert again.status_code == 409 and again.json()["code"] == "approval_denied", again.text


def test_only_approvers_decide_and_never_their_own(client: TestClient, doomed: Path) -> None:
    parked = _delete(client)
    forbidden = client.post(f"/v1/approvals/{parked['approval']['id']}/approve", headers=auth())
    assert forbidden.status_code == 403 and forbidden.json()["code"] == "not_an_approver"
    own = _delete(client, CAROL, call_id="carol-1")
    refused = client.post(f"/v1/approvals/{own['approval']['id']}/approve", headers=auth(CAROL))
    assert refused.status_code == 403 and refused.json()["code"] == "self_approval"
    assert doomed.exists()


def test_resumed_call_rechecks_state_guards(client: TestClient, doomed: Path) -> None:
    sha = hashlib.sha256(b"bye").hexdigest()
    parked = _delete(client, expected_state={"sha256": sha})
    doomed.write_text("changed while waiting")
    client.post(f"/v1/approvals/{parked['approval']['id']}/approve", headers=auth(BOB))
    done = _wait(client, parked)
    assert done["result"]["outcome"] == "failed"
    assert done["result"]["error"]["phase"] == "validate"
    assert done["result"]["error"]["type"] == "state_mismatch"
    assert doomed.read_text() == "changed while waiting"


def _token(client: TestClient) -> tuple[dict[str, Any], str]:
    parked = _delete(client)
    response = client.post(
        f"/v1/approvals/{parked['approval']['id']}/approve",
        json={"resume": False},
        headers=auth(BOB),
    )
    assert response.status_code == 200, response.text
    return parked, response.json()["approval_token"]


def test_token_path_runs_once(client: TestClient, doomed: Path) -> None:
    parked, token = _token(client)
    closed = _wait(client, parked)
    assert closed["result"]["outcome"] == "cancelled"
    assert doomed.exists()
    resubmit = body(
        "fs.delete_file", {"path": "doomed.txt"}, idempotency_key="del-1", approval_token=token
    )
    done = client.post("/v1/executions", json=resubmit, headers=auth()).json()
    assert done["result"]["outcome"] == "succeeded", done["result"]
    assert not doomed.exists()
    doomed.write_text("again")
    second = body(
        "fs.delete_file", {"path": "doomed.txt"}, idempotency_key="del-2", approval_token=token
    )
    refused = client.post("/v1/executions", json=second, headers=auth()).json()["result"]
    assert refused["outcome"] == "failed" and refused["error"]["type"] == "approval_token_used"
    assert doomed.exists()


@pytest.mark.parametrize(
    "change, code",
    [
        ({"arguments": {"path": "other.txt"}}, "approval_token_invalid"),
        ({"tamper": True}, "approval_token_invalid"),
        ({"key": CAROL}, "approval_token_invalid"),
    ],
)
def test_token_misuse_is_refused(
    client: TestClient, doomed: Path, workspace_root: Path, change: dict[str, Any], code: str
) -> None:
    (workspace_root / "other.txt").write_text("x")
    _, token = _token(client)
    if change.get("tamper"):
        payload, mac = token.split(".")
        token = payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + mac
    args = change.get("arguments", {"path": "doomed.txt"})
    key = change.get("key")
    resubmit = body("fs.delete_file", args, idempotency_key="x", approval_token=token)
    if key == CAROL:
        resubmit["actor"] = {"user_id": "carol", "agent_id": "x"}
    result = client.post(
        "/v1/executions", json=resubmit, headers=auth(key) if key else auth()
    ).json()["result"]
    assert result["outcome"] == "failed"
    assert result["error"]["phase"] == "policy"
    assert result["error"]["type"] == code
    assert doomed.exists() and (workspace_root / "other.txt").exists()


def test_pending_approval_expires(settings: Settings, doomed: Path) -> None:
    quick = settings.model_copy(update={"approval_ttl": 0.3, "sweep_interval": 0.1})
    with TestClient(create_app(quick)) as client:
        parked = _delete(client)
        done = _wait(client, parked)  # a long poll: it answers once the sweeper expired it
        assert done["result"]["outcome"] == "failed"
        assert done["result"]["error"]["type"] == "approval_expired"
        late = client.post(f"/v1/approvals/{parked['approval']['id']}/approve", headers=auth(BOB))
        assert late.status_code == 409 and late.json()["code"] == "approval_expired"
        expired = client.get("/v1/approvals?status=expired", headers=auth(BOB)).json()["items"]
        assert parked["approval"]["id"] in [a["id"] for a in expired]
    assert doomed.exists()


def _forge(client: TestClient, **claims: Any) -> str:
    """A token signed with the gateway's own key (as if an agent had stolen it)."""
    key = client.app.state.services.approval_key  # type: ignore[attr-defined]
    payload = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()
    mac = hmac.new(key, payload, hashlib.sha256).digest()
    b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()  # noqa: E731
    return f"{b64(payload)}.{b64(mac)}"


def test_a_re_signed_token_cannot_spend_an_approval_granted_to_another_call(
    client: TestClient, doomed: Path
) -> None:
    carols = _delete(client, CAROL)
    granted = client.post(
        f"/v1/approvals/{carols['approval']['id']}/approve",
        json={"resume": False},
        headers=auth(BOB),
    )
    assert granted.status_code == 200, granted.text
    forged = _forge(
        client,
        approval_id=carols["approval"]["id"],
        tool="fs.delete_file",
        version="1.0.0",
        arguments_sha256=sha256_json({"path": "doomed.txt"}),  # carol's arguments, and alice's
        actor="alice",
        workspace="demo",
        expires_ms=int(time.time() * 1000) + 60_000,
    )
    payload = body(
        "fs.delete_file", {"path": "doomed.txt"}, idempotency_key="forged", approval_token=forged
    )
    result = client.post("/v1/executions", json=payload, headers=auth()).json()["result"]
    assert result["outcome"] == "failed", result
    assert result["error"]["type"] == "approval_token_invalid"
    assert "another actor" in result["error"]["message"]
    assert doomed.exists()
    approval = client.get(f"/v1/approvals/{carols['approval']['id']}", headers=auth(BOB)).json()
    assert approval["status"] == "approved"  # still carol's to spend


@pytest.mark.parametrize(
    "bad",
    [
        {"expires_ms": "99999999999999"},
        {"expires_ms": True},
        {"actor": ["alice"]},
        {"approval_id": None},
    ],
)
def test_a_token_with_malformed_claims_is_invalid_not_an_internal_error(
    client: TestClient, doomed: Path, bad: dict[str, Any]
) -> None:
    claims: dict[str, Any] = {
        "approval_id": "ap_x",
        "tool": "fs.delete_file",
        "version": "1.0.0",
        "arguments_sha256": "0" * 64,
        "actor": "alice",
        "workspace": "demo",
        "expires_ms": int(time.time() * 1000) + 60_000,
    }
    token = _forge(client, **{**claims, **bad})
    payload = body(
        "fs.delete_file", {"path": "doomed.txt"}, idempotency_key="m", approval_token=token
    )
    response = client.post("/v1/executions", json=payload, headers=auth())
    assert response.status_code == 200, response.text
    error = response.json()["result"]["error"]
    assert error["type"] == "approval_token_invalid", error


def _past(deadline_ms: int) -> None:
    """Sleep until ``deadline_ms`` (epoch ms) has passed."""
    while time.time() * 1000 <= deadline_ms:
        time.sleep(max(deadline_ms / 1000 - time.time(), 0) + 0.01)


def test_approving_a_call_past_its_deadline_is_refused(settings: Settings, doomed: Path) -> None:
    no_sweeper = settings.model_copy(update={"sweep_interval": 3600})
    with TestClient(create_app(no_sweeper)) as client:
        deadline = int(time.time() * 1000) + 2000
        parked = _delete(client, deadline=deadline)
        assert parked["approval"]["expires_at_ms"] == deadline  # capped by the call's deadline
        _past(deadline)
        late = client.post(f"/v1/approvals/{parked['approval']['id']}/approve", headers=auth(BOB))
        assert late.status_code == 409, late.text
        assert late.json()["code"] == "approval_expired" and "deadline" in late.json()["detail"]
        done = _wait(client, parked)
        result = done["result"]
        assert result["outcome"] == "failed" and result["error"]["type"] == "deadline_exceeded"
        assert result["side_effect"]["attempted"] is False
        types = [
            e["type"] for e in client.get(parked["links"]["events"], headers=auth()).json()["items"]
        ]
        assert "tool.started" not in types
    assert doomed.exists()


def test_a_call_past_its_deadline_leaves_the_approval_inbox(
    settings: Settings, doomed: Path
) -> None:
    no_sweeper = settings.model_copy(update={"sweep_interval": 3600})
    with TestClient(create_app(no_sweeper)) as client:
        deadline = int(time.time() * 1000) + 2000
        parked = _delete(client, deadline=deadline)
        other = _delete(client, call_id="no-deadline", idempotency_key="del-2")
        pending = client.get("/v1/approvals?status=pending", headers=auth(BOB)).json()["items"]
        assert {parked["approval"]["id"], other["approval"]["id"]} <= {a["id"] for a in pending}
        _past(deadline)
        pending = client.get("/v1/approvals?status=pending", headers=auth(BOB)).json()["items"]
        assert [a["id"] for a in pending] == [other["approval"]["id"]]
        approval = client.get(f"/v1/approvals/{parked['approval']['id']}", headers=auth(BOB))
        assert approval.json()["status"] == "expired"
        done = client.get(parked["links"]["self"], headers=auth()).json()
        assert done["status"] == "completed"  # closed by the sweep, not by a decision
        result = done["result"]
        assert result["outcome"] == "failed" and result["error"]["type"] == "deadline_exceeded"
        assert result["side_effect"]["attempted"] is False
        assert client.get(other["links"]["self"], headers=auth()).json()["status"] == (
            "awaiting_approval"
        )
    assert doomed.exists()


def _with_approvers(settings: Settings, approvers: dict[str, Any]) -> Settings:
    rules = settings.path(settings.policies_dir) / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data["approvers"] = approvers
    rules.write_text(yaml.safe_dump(data))
    return settings


def test_with_no_approver_roles_nobody_lists_or_decides_approvals(
    settings: Settings, doomed: Path
) -> None:
    """``approvers: {}`` names no role: the call still waits for an approval, and listing
    and deciding agree that nobody may give it (listing once fell back to 'approver')."""
    with TestClient(create_app(_with_approvers(settings, {}))) as client:
        parked = _delete(client)
        assert parked["status"] == "awaiting_approval"
        listed = client.get("/v1/approvals", headers=auth(BOB))
        assert listed.status_code == 403 and listed.json()["code"] == "not_an_approver"
        approval = f"/v1/approvals/{parked['approval']['id']}"
        assert client.get(approval, headers=auth(BOB)).status_code == 404
        decided = client.post(f"{approval}/approve", headers=auth(BOB))
        assert decided.status_code == 403 and decided.json()["code"] == "not_an_approver"
        assert client.get(parked["links"]["self"], headers=auth(BOB)).status_code == 404
    assert doomed.exists()


def test_approver_roles_by_risk_alone_list_and_decide(settings: Settings, doomed: Path) -> None:
    """Without ``default``, the roles of ``by_risk`` are the approvers: of their risk only."""
    by_risk = {"by_risk": {"high": ["approver"]}, "allow_self_approval": False}
    with TestClient(create_app(_with_approvers(settings, by_risk))) as client:
        parked = _delete(client)
        listed = client.get("/v1/approvals?status=pending", headers=auth(BOB))
        assert [a["id"] for a in listed.json()["items"]] == [parked["approval"]["id"]]
        decided = client.post(
            f"/v1/approvals/{parked['approval']['id']}/approve", headers=auth(BOB)
        )
        assert decided.status_code == 202, decided.text
        assert _wait(client, parked)["result"]["outcome"] == "succeeded"
    assert not doomed.exists()


AUDITORS_APPROVE_DELETES = """approver_roles := ["auditor"] if {
	call.tool == "fs.delete_file"
} else := object.get("""


def _auditors_approve_deletes(project: Path) -> None:
    """A rule naming other approver roles than the data's ``approvers`` for deletes: only
    ``auditor``, a role carol (an agent too) holds and the data's ``approvers`` does not name."""
    module = project / "rego" / "toolgate.rego"
    text = module.read_text()
    assert text.count("approver_roles := object.get(") == 1
    module.write_text(text.replace("approver_roles := object.get(", AUDITORS_APPROVE_DELETES))
    actors = project / "policies" / "actors.yaml"
    data = yaml.safe_load(actors.read_text())
    data["actors"]["carol"]["roles"] = ["agent", "auditor"]
    actors.write_text(yaml.safe_dump(data))


def test_the_decision_s_approver_roles_decide_its_approval(
    settings: Settings, project: Path, doomed: Path
) -> None:
    """The approval keeps the decision's roles and only they decide it. Checked against the
    data's roles, bob (an ``approver``) could approve, and the resumed call then failed on the
    policy's own check with his approval spent; carol (an ``auditor`` only) could not approve
    at all. She sees the approval she may decide, not the list of all (the data's
    ``approvers`` do)."""
    _auditors_approve_deletes(project)
    with TestClient(create_app(settings)) as client:
        parked = _delete(client)
        approval = f"/v1/approvals/{parked['approval']['id']}"
        assert client.get(approval, headers=auth(BOB)).json()["approver_roles"] == ["auditor"]
        refused = client.post(f"{approval}/approve", headers=auth(BOB))
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "not_an_approver"
        assert "['auditor']" in refused.json()["detail"]
        assert client.get(approval, headers=auth(BOB)).json()["status"] == "pending"
        seen = client.get(approval, headers=auth(CAROL))
        assert seen.status_code == 200 and seen.json()["status"] == "pending", seen.text
        listed = client.get("/v1/approvals", headers=auth(CAROL))
        assert listed.status_code == 403 and listed.json()["code"] == "not_an_approver"
        decided = client.post(f"{approval}/approve", headers=auth(CAROL))
        assert decided.status_code == 202, decided.text
        assert _wait(client, parked)["result"]["outcome"] == "succeeded"
    assert not doomed.exists()


def test_the_page_of_an_approval_opens_to_the_roles_its_decision_named(
    settings: Settings, project: Path, doomed: Path
) -> None:
    """Carol, sent the approval's page, signs in, sees it and approves there: the page let
    only the data's ``approvers`` in (403 'your key is an agent's'), though she alone may
    decide it. Alice, the requester, sees her own pending call as the API shows it to her
    (one rule for every door), told who decides, with nothing to click."""
    _auditors_approve_deletes(project)
    with TestClient(create_app(settings), follow_redirects=False) as client:
        parked = _delete(client)
        page_url = f"/ui/approvals/{parked['approval']['id']}"
        for key, name in ((ALICE, "alice"), (CAROL, "carol")):
            client.cookies.clear()
            form = client.get("/ui/signin")
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert token is not None, form.text
            signed = client.post("/ui/signin", data={"csrf": token.group(1), "api_key": key})
            assert signed.status_code == 303, signed.text
            shown = client.get(page_url)
            if name == "alice":
                assert shown.status_code == 200, shown.text
                assert "You cannot decide this approval" in shown.text
                assert "auditor" in shown.text and 'value="approve"' not in shown.text
        assert shown.status_code == 200, shown.text
        assert "doomed.txt" in shown.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', shown.text)
        assert csrf is not None
        decided = client.post(
            f"{page_url}/decide", data={"decision": "approve", "csrf": csrf.group(1)}
        )
        assert decided.status_code == 303, decided.text
        assert _wait(client, parked)["result"]["outcome"] == "succeeded"
    assert not doomed.exists()


def test_a_parked_call_found_by_run_and_call_id_carries_its_approval(
    client: TestClient, doomed: Path
) -> None:
    # An agent that lost the answer finds its call by run and call id (docs/api.md): the list
    # gives each execution as reading it by id does, its pending approval included
    parked = _delete(client)
    found = client.get(
        f"/v1/executions?run_id={parked['run_id']}&call_id={parked['call_id']}", headers=auth()
    ).json()
    by_id = client.get(parked["links"]["self"], headers=auth()).json()
    assert found["count"] == 1
    assert found["items"][0] == by_id
    assert by_id["approval"]["id"] == parked["approval"]["id"]
    assert by_id["approval"]["status"] == "pending"


def _lookup(client: TestClient, key: str, **query: str) -> list[dict[str, Any]]:
    found = client.get("/v1/approvals", params=query, headers=auth(key))
    assert found.status_code == 200, found.text
    return list(found.json()["items"])


def test_an_approval_is_found_by_its_run_and_call_by_whoever_may_see_it(
    client: TestClient, doomed: Path
) -> None:
    """An agent whose call was parked (a framework's interruption) knows its run and call
    ids only: it finds the approval by them, as do those who may decide it; nobody else."""
    parked = _delete(client, run_id="hitl-1", call_id="c-hitl")
    carols = _delete(client, CAROL, run_id="hitl-1", call_id="c-hitl", idempotency_key="del-2")
    mine = parked["approval"]["id"]
    ids = {"run_id": "hitl-1", "call_id": "c-hitl"}
    found = _lookup(client, ALICE, **ids)  # the requester, no approver
    assert [a["id"] for a in found] == [mine]
    assert found[0]["run_id"] == "hitl-1" and found[0]["call_id"] == "c-hitl"
    assert found[0]["execution_id"] == parked["id"]
    both = {a["id"] for a in _lookup(client, BOB, **ids)}  # an approver: everyone's
    assert both == {mine, carols["approval"]["id"]}
    assert [a["id"] for a in _lookup(client, ALICE, run_id="hitl-1", status="pending")] == [mine]
    assert _lookup(client, ALICE, run_id="hitl-1", call_id="other") == []
    assert _lookup(client, ALICE, run_id="hitl-1", status="denied") == []
    # without an id it is the inbox, still for approvers only
    inbox = client.get("/v1/approvals", headers=auth(ALICE))
    assert inbox.status_code == 403 and inbox.json()["code"] == "not_an_approver"
    shown = client.get(f"/v1/approvals/{mine}", headers=auth()).json()
    assert (shown["run_id"], shown["call_id"]) == ("hitl-1", "c-hitl")
    decided = client.post(f"/v1/approvals/{mine}/deny", headers=auth(BOB)).json()
    assert (decided["run_id"], decided["call_id"]) == ("hitl-1", "c-hitl")
    assert doomed.exists()


def test_the_approvals_lookup_is_bounded(
    client: TestClient, doomed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.service import approvals as service_approvals

    monkeypatch.setattr(service_approvals, "LIST_LIMIT", 2)
    made = [
        _delete(client, run_id="many", call_id=f"c-{i}", idempotency_key=f"many-{i}")
        for i in range(3)
    ]
    found = {a["id"] for a in _lookup(client, ALICE, run_id="many")}
    assert len(found) == 2 and found < {p["approval"]["id"] for p in made}


@pytest.mark.parametrize(
    "query",
    [
        "run_id=",
        "call_id=",
        f"run_id={'r' * 257}",
        "run_id=a%0Ab",
        "run_id=a&run_id=b",
        "run_id=a&tool=fs.delete_file",
    ],
)
def test_a_malformed_or_unknown_query_is_refused(client: TestClient, query: str) -> None:
    """An id no call can have, one given twice, or a parameter the route does not take is
    400 invalid_query, not an empty list: on the approvals lookup as on the executions one."""
    for route in ("/v1/approvals", "/v1/executions"):
        response = client.get(f"{route}?{query}", headers=auth(BOB))
        assert response.status_code == 400, (route, query, response.text)
        assert response.json()["code"] == "invalid_query", (route, query)
