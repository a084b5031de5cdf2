"""Dry-run plans (POST /v1/plans): what a call would do, with no side effect."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings, load_settings
from tests.server.helpers import auth, body


def _plan(client: TestClient, payload: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = client.post("/v1/plans", json=payload, headers={**auth(), **headers})
    assert response.status_code == 200, response.text
    return dict(response.json())


def _executions(client: TestClient) -> list[Any]:
    return list(client.get("/v1/executions", headers=auth()).json()["items"])


def test_a_plan_for_a_write_shows_the_diff_and_changes_nothing(
    client: TestClient, workspace_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = workspace_root / "notes.txt"
    target.write_text("old\n")
    payload = body(
        "fs.write_file", {"path": "./notes.txt", "content": "new\n"}, idempotency_key="k-plan"
    )
    with caplog.at_level(logging.INFO, logger="toolgate.plans"):
        plan = _plan(client, payload)
    assert plan["would"] == "run" and plan["error"] is None, plan
    assert plan["tool"] == {"name": "fs.write_file", "version": "1.2.0", "deprecated": False}
    assert plan["arguments"] == {"path": "notes.txt", "content": "new\n", "create_dirs": True}
    assert plan["validation"] == {"ok": True}
    assert plan["policy"]["result"] == "allow" and plan["policy"]["approval"]["required"] is False
    assert plan["locks"] == [{"key": "ws:demo:file:notes.txt", "mode": "exclusive"}]
    assert "-old" in plan["preview"]["diff"] and "+new" in plan["preview"]["diff"]
    assert target.read_text() == "old\n"
    assert _executions(client) == []
    audit = [r for r in caplog.records if r.name == "toolgate.plans"]
    assert len(audit) == 1 and audit[0].plan["arguments_sha256"] == plan["arguments_sha256"]
    assert audit[0].plan["principal"] == "alice" and "new" not in audit[0].getMessage()
    # the key is still free: the real call with the same key runs, with the same hash
    payload["call_id"] = payload["call_id"] + "-real"
    real = client.post("/v1/executions", json=payload, headers=auth())
    assert real.status_code == 200, real.text
    assert real.json()["result"]["outcome"] == "succeeded"
    events = client.get(real.json()["links"]["events"], headers=auth()).json()["items"]
    decided = next(e for e in events if e["type"] == "policy.decided")
    assert decided["data"]["input"]["arguments_sha256"] == plan["arguments_sha256"]
    assert target.read_text() == "new\n"


def test_a_plan_for_a_denied_call_says_so(client: TestClient, workspace_root: Path) -> None:
    plan = _plan(client, body("fs.write_file", {"path": ".git/config", "content": "x"}))
    assert plan["would"] == "fail", plan
    assert plan["policy"]["result"] == "deny" and plan["policy"]["reasons"]
    assert plan["error"]["type"] == "policy_denied" and plan["error"]["phase"] == "policy"
    assert plan["preview"] is None  # a refused caller sees nothing of the state
    assert not (workspace_root / ".git" / "config").exists()


def test_a_plan_for_a_call_needing_approval_names_the_approvers(
    client: TestClient, workspace_root: Path
) -> None:
    (workspace_root / "doomed.txt").write_text("bye")
    plan = _plan(client, body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="d"))
    assert plan["would"] == "await_approval", plan
    approval = plan["policy"]["approval"]
    assert approval["required"] is True and approval["approver_roles"] == ["approver"]
    assert approval["approver_roles_from"] == "decision"
    assert plan["preview"]["exists"] is True
    assert (workspace_root / "doomed.txt").exists()
    assert client.get("/v1/approvals", headers=auth("tg_dev_bob")).json()["count"] == 0


SHIPPED_APPROVERS = "approver_roles := object.get("
SECURITY_APPROVES_DELETES = """approver_roles := ["security"] if {
	call.tool == "fs.delete_file"
} else := object.get("""


def _edited_policy(project: Path, old: str, new: str, database_url: str) -> Settings:
    """The project's settings after replacing ``old`` by ``new`` in its rego/toolgate.rego."""
    module = project / "rego" / "toolgate.rego"
    text = module.read_text()
    assert text.count(old) == 1, old
    module.write_text(text.replace(old, new))
    return load_settings(project / "toolgate.yaml", env={}, database_url=database_url)


def test_the_approvers_of_a_plan_are_those_of_the_decision(
    project: Path, database_url: str, workspace_root: Path
) -> None:
    """A rule that names other approver roles than the data's `approvers`: the plan shows the
    decision's, as the real call's policy.decided event records them."""
    edited = _edited_policy(project, SHIPPED_APPROVERS, SECURITY_APPROVES_DELETES, database_url)
    (workspace_root / "doomed.txt").write_text("bye")
    delete = body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="d")
    with TestClient(create_app(edited), raise_server_exceptions=False) as client:
        plan = _plan(client, delete)
        real = client.post("/v1/executions", json=delete, headers=auth())
        assert real.status_code == 202, real.text
        events = client.get(real.json()["links"]["events"], headers=auth()).json()["items"]
    assert plan["would"] == "await_approval", plan
    approval = plan["policy"]["approval"]
    assert approval["approver_roles"] == ["security"], approval
    assert approval["approver_roles_from"] == "decision"
    decided = next(e for e in events if e["type"] == "policy.decided")
    assert decided["data"]["approver_roles"] == ["security"], decided


def test_without_approvers_in_the_decision_a_plan_names_the_data_s(
    project: Path, database_url: str, workspace_root: Path
) -> None:
    """A policy whose require_approval decision carries no approver_roles: the plan falls
    back to the data's `approvers` for the tool's risk, and says so."""
    edited = _edited_policy(
        project, '\t"approver_roles": sort(approver_roles),\n', "", database_url
    )
    (workspace_root / "doomed.txt").write_text("bye")
    with TestClient(create_app(edited), raise_server_exceptions=False) as client:
        plan = _plan(client, body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="d"))
    approval = plan["policy"]["approval"]
    assert plan["would"] == "await_approval", plan
    assert approval["approver_roles"] == ["approver"], approval
    assert approval["approver_roles_from"] == "policy_data"
    assert approval["self_approval"] is False


def test_a_failing_state_guard_is_reported(client: TestClient, workspace_root: Path) -> None:
    (workspace_root / "a.txt").write_text("one")
    wrong = hashlib.sha256(b"two").hexdigest()
    plan = _plan(
        client,
        body("fs.write_file", {"path": "a.txt", "content": "x"}, expected_state={"sha256": wrong}),
    )
    assert plan["would"] == "fail" and plan["state_guards"]["status"] == "failed", plan
    assert plan["validation"] == {"ok": True}
    right = hashlib.sha256(b"one").hexdigest()
    plan = _plan(
        client,
        body("fs.write_file", {"path": "a.txt", "content": "x"}, expected_state={"sha256": right}),
    )
    assert plan["state_guards"] == {"status": "passed", "keys": ["sha256"]}, plan
    assert (workspace_root / "a.txt").read_text() == "one"


def test_invalid_arguments_are_a_failing_plan(client: TestClient, workspace_root: Path) -> None:
    plan = _plan(client, body("fs.write_file", {"path": "x.txt"}))
    assert plan["would"] == "fail" and plan["validation"]["ok"] is False, plan
    assert plan["error"]["type"] == "invalid_arguments"
    assert not (workspace_root / "x.txt").exists()


def test_bad_input_gets_the_same_4xx_as_executions(client: TestClient) -> None:
    bad: list[Any] = [
        {"tool": {"name": "fs.read_file"}},  # fields missing
        [1, 2],
    ]
    for payload in bad:
        planned = client.post("/v1/plans", json=payload, headers=auth())
        executed = client.post("/v1/executions", json=payload, headers=auth())
        assert planned.status_code == executed.status_code and 400 <= planned.status_code < 500
        assert planned.json()["code"] == executed.json()["code"], planned.text
    raw = client.post(
        "/v1/plans", content=b"{", headers={**auth(), "Content-Type": "application/json"}
    )
    assert raw.status_code == 400 and raw.headers["content-type"] == "application/problem+json"
    assert client.post("/v1/plans", json=body("fs.read_file", {"path": "x"})).status_code == 401


def test_a_plan_counts_against_no_quota(
    project: Path, database_url: str, workspace_root: Path
) -> None:
    """With a quota of 2 low-risk calls a minute, five plans leave both calls free, and the
    quota is live: the third real call is refused."""
    rules = project / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data["quotas"] = {"calls_per_minute": {"low": 2}}
    rules.write_text(yaml.safe_dump(data))
    limited = load_settings(project / "toolgate.yaml", env={}, database_url=database_url)
    (workspace_root / "a.txt").write_text("a")
    read = body("fs.read_file", {"path": "a.txt"})
    with TestClient(create_app(limited), raise_server_exceptions=False) as client:
        plans = [_plan(client, read) for _ in range(5)]
        assert {plan["would"] for plan in plans} == {"run"}, plans
        outcomes = []
        for i in range(3):
            payload = {**read, "call_id": f"real-{i}"}
            response = client.post("/v1/executions", json=payload, headers=auth())
            assert response.status_code == 200, response.text
            result = response.json()["result"]
            outcomes.append(result["error"]["type"] if result["error"] else result["outcome"])
    assert outcomes == ["succeeded", "succeeded", "quota_exceeded"]
