"""The decision log: one OPA-shaped event per policy decision, masked as configured."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
