"""The decision log: one OPA-shaped event per policy decision, masked as configured."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.policy.loader import load_policy_sources
from gateway.server.app import create_app
from gateway.settings import DecisionLogSettings, Settings
from tests.server.helpers import auth, body


def test_each_decision_writes_one_masked_event(
    settings: Settings, workspace_root: Path, tmp_path: Path
) -> None:
    target = tmp_path / "logs" / "decisions.jsonl"
    logged = settings.model_copy(
        update={
            "decision_log": DecisionLogSettings(
                enabled=True,
                path=str(target),
                mask=("/input/arguments/content", "/input/actor/roles"),
                labels={"environment": "test"},
            )
        }
    )
    with TestClient(create_app(logged), raise_server_exceptions=False) as client:
        wrote = client.post(
            "/v1/executions",
            json=body("fs.write_file", {"path": "d.txt", "content": "top secret text"}),
            headers=auth(),
        ).json()
        denied = client.post(
            "/v1/executions",
            json=body("fs.read_file", {"path": "x.txt"}, workspace={"id": "ops"}),
            headers=auth(),
        ).json()
    assert wrote["result"]["outcome"] == "succeeded"
    assert denied["result"]["error"]["type"] == "policy_denied"
    text = target.read_text()
    assert "top secret text" not in text
    events = [json.loads(line) for line in text.splitlines()]
    assert len(events) == 2
    revision = load_policy_sources(
        settings.path(settings.rego_dir), settings.path(settings.policies_dir)
    ).revision()
    for event, execution in zip(events, (wrote, denied), strict=True):
        assert re.fullmatch(r"[0-9a-f-]{36}", event["decision_id"])
        assert event["path"] == "toolgate/decision"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", event["timestamp"])
        assert event["labels"]["environment"] == "test" and event["labels"]["version"]
        assert event["labels"]["id"]
        assert event["bundles"] == {"toolgate": {"revision": revision}}
        assert event["revision"] == revision
        assert event["toolgate"]["execution_id"] == execution["id"]
        assert event["toolgate"]["kind"] == "execution"
        assert "roles" not in event["input"]["actor"]
        assert event["input"]["actor"]["user_id"] == "alice"
        assert event["metrics"]["timer_rego_query_eval_ns"] > 0
    first, second = events
    assert first["result"]["result"] == "allow"
    assert "content" not in first["input"]["arguments"]
    assert first["input"]["arguments"]["path"] == "d.txt"
    assert first["erased"] == ["/input/arguments/content", "/input/actor/roles"]
    assert second["result"]["result"] == "deny" and second["result"]["reasons"]
    assert second["erased"] == ["/input/actor/roles"]  # a read has no content to erase
    assert second["input"]["workspace"]["id"] == "ops"


def test_a_plan_is_logged_as_a_plan_and_writes_no_execution(
    settings: Settings, workspace_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "decisions.jsonl"
    logged = settings.model_copy(
        update={"decision_log": DecisionLogSettings(enabled=True, path=str(target))}
    )
    payload = body(
        "fs.write_file", {"path": "p.txt", "content": "x"}, idempotency_key="k-plan-logged"
    )
    with (
        TestClient(create_app(logged), raise_server_exceptions=False) as client,
        caplog.at_level(logging.INFO, logger="toolgate.plans"),
    ):
        plan = client.post("/v1/plans", json=payload, headers=auth()).json()
        denied_payload = body("fs.write_file", {"path": ".git/config", "content": "x"})
        refused = client.post("/v1/plans", json=denied_payload, headers=auth()).json()
        executions = client.get("/v1/executions", headers=auth()).json()["items"]
    assert executions == [] and not (workspace_root / "p.txt").exists()
    events = [json.loads(line) for line in target.read_text().splitlines()]
    assert [e["toolgate"] for e in events] == [
        {"kind": "plan", "run_id": payload["run_id"], "call_id": payload["call_id"]},
        {"kind": "plan", "run_id": "run-1", "call_id": denied_payload["call_id"]},
    ]
    allowed, denied = events
    assert allowed["input"]["actor"]["user_id"] == "alice"
    assert allowed["input"]["tool"]["name"] == "fs.write_file"
    assert allowed["input"]["arguments_sha256"] == plan["arguments_sha256"]
    assert allowed["result"]["result"] == "allow" and plan["would"] == "run"
    assert denied["result"]["result"] == "deny" and refused["would"] == "fail"
    lines = [r for r in caplog.records if r.name == "toolgate.plans"]
    assert [r.levelno for r in lines] == [logging.INFO, logging.INFO]
    assert lines[0].plan["run_id"] == payload["run_id"]  # type: ignore[attr-defined]
    assert lines[0].plan["call_id"] == payload["call_id"]  # type: ignore[attr-defined]
