"""Quotas (policy data ``quotas.calls_per_minute``): per actor, workspace and tool risk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings, load_settings
from tests.helpers import BOB
from tests.server.helpers import auth, body


@pytest.fixture
def limited(project: Path, database_url: str) -> Settings:
    rules = project / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data["quotas"] = {"calls_per_minute": {"low": 3, "medium": 100}}
    rules.write_text(yaml.safe_dump(data))
    return load_settings(project / "toolgate.yaml", env={}, database_url=database_url)


@pytest.fixture
def client(limited: Settings, workspace_root: Path) -> Iterator[TestClient]:
    (workspace_root / "a.txt").write_text("a")
    with TestClient(create_app(limited), raise_server_exceptions=False) as test_client:
        yield test_client


def _read(client: TestClient, key: str | None = None, workspace: str = "demo") -> dict:  # type: ignore[type-arg]
    payload = body("fs.read_file", {"path": "a.txt"}, workspace={"id": workspace})
    if key is not None:
        payload["actor"] = {"user_id": "bob", "agent_id": "x"}
    response = client.post("/v1/executions", json=payload, headers=auth(key) if key else auth())
    assert response.status_code == 200, response.text
    result: dict = response.json()["result"]  # type: ignore[type-arg]
    return result


def test_calls_over_the_quota_fail_at_validate_and_say_when_to_retry(client: TestClient) -> None:
    assert [_read(client)["outcome"] for _ in range(3)] == ["succeeded"] * 3
    refused = _read(client)
    assert refused["outcome"] == "failed"
    error = refused["error"]
    assert error["type"] == "quota_exceeded" and error["retryable"] is True
    assert error["phase"] == "validate"
    assert 0 < error["retry_after_ms"] <= 60_000
    assert "3 calls per minute of low-risk tools in workspace demo" in error["message"]


def test_the_quota_is_per_actor_and_per_risk(client: TestClient) -> None:
    for _ in range(3):
        _read(client)
    assert _read(client)["error"]["type"] == "quota_exceeded"
    assert _read(client, key=BOB)["outcome"] == "succeeded"  # another actor
    write = body("fs.write_file", {"path": "b.txt", "content": "b"})  # medium risk
    response = client.post("/v1/executions", json=write, headers=auth())
    assert response.json()["result"]["outcome"] == "succeeded"


def test_a_queued_call_does_not_count_against_itself_when_a_worker_runs_it(
    client: TestClient,
) -> None:
    """The third low-risk call of the minute is accepted, queued, and then runs: its
    re-validation by the worker does not count the call itself a fourth time."""
    for _ in range(2):
        assert _read(client)["outcome"] == "succeeded"
    payload = body("fs.read_file", {"path": "a.txt"})
    queued = client.post(
        "/v1/executions", json=payload, headers={**auth(), "Prefer": "respond-async"}
    )
    assert queued.status_code == 202, queued.text
    done = client.get(queued.json()["links"]["self"] + "?wait=10", headers=auth())
    assert done.status_code == 200, done.text
    assert done.json()["result"]["outcome"] == "succeeded", done.json()["result"]
    assert _read(client)["error"]["type"] == "quota_exceeded"  # and it did count once
