"""``GET /metrics``: the Prometheus series after known calls, and who may read them."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import MetricsSettings, Settings
from tests.helpers import BOB
from tests.server.helpers import auth, body


def samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics", headers=auth())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_a_write_a_denial_and_an_approval(
    client: TestClient, workspace_root: Path, database_url: str
) -> None:
    wrote = client.post(
        "/v1/executions",
        json=body("fs.write_file", {"path": "m.txt", "content": "hi"}),
        headers=auth(),
    )
    assert wrote.status_code == 200 and wrote.json()["result"]["outcome"] == "succeeded"
    denied = client.post(
        "/v1/executions",
        json=body("fs.read_file", {"path": "x.txt"}, workspace={"id": "ops"}),
        headers=auth(),
    )
    assert denied.json()["result"]["error"]["type"] == "policy_denied", denied.text
    (workspace_root / "doomed.txt").write_text("bye")
    parked = client.post(
        "/v1/executions",
        json=body("fs.delete_file", {"path": "doomed.txt"}, idempotency_key="m-del"),
        headers=auth(),
    ).json()
    before = samples(client)
    assert value(before, "toolgate_approvals_pending") == 1
    assert value(before, "toolgate_approvals_total", event="requested") == 1
    approval_id = parked["approval"]["id"]
    decided = client.post(f"/v1/approvals/{approval_id}/approve", headers=auth(BOB))
    assert decided.status_code == 202, decided.text
    done = client.get(parked["links"]["self"] + "?wait=10", headers=auth()).json()
    assert done["result"]["outcome"] == "succeeded", done

    found = samples(client)
    ok = {"outcome": "succeeded", "error_phase": ""}
    assert value(found, "toolgate_executions_total", tool="fs.write_file", **ok) == 1
    assert value(found, "toolgate_executions_total", tool="fs.delete_file", **ok) == 1
    assert (
        value(
            found,
            "toolgate_executions_total",
            tool="fs.read_file",
            outcome="failed",
            error_phase="policy",
        )
        == 1
    )
    assert value(found, "toolgate_approvals_total", event="approved") == 1
    assert value(found, "toolgate_approvals_pending") == 0
    assert value(found, "toolgate_executions_in_flight") == 0
    # every stage the write went through was timed; the denial stopped at policy
    assert value(found, "toolgate_stage_duration_seconds_count", stage="execute") == 2
    assert value(found, "toolgate_stage_duration_seconds_count", stage="policy") == 4
    assert value(found, "toolgate_policy_decision_duration_seconds_count", backend="embedded") == 4
    lookups = value(found, "toolgate_policy_cache_lookups_total", result="hit") + value(
        found, "toolgate_policy_cache_lookups_total", result="miss"
    )
    assert lookups == 4
    reserves = value(
        found, "toolgate_store_transaction_duration_seconds_count", operation="reserve"
    )
    assert reserves >= 1  # a group commit is named after its first write
    if database_url.startswith("sqlite"):  # PostgreSQL commits each write on its own
        assert value(found, "toolgate_store_group_commit_size_count") >= 1


def test_metrics_need_the_api_key(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 401, response.text
    assert response.headers["content-type"].startswith("application/problem+json")


def test_metrics_can_be_open_or_off(settings: Settings) -> None:
    open_ = settings.model_copy(update={"metrics": MetricsSettings(open=True)})
    with TestClient(create_app(open_), raise_server_exceptions=False) as client:
        response = client.get("/metrics")
        assert response.status_code == 200 and "toolgate_executions_total" in response.text
    off = settings.model_copy(update={"metrics": MetricsSettings(enabled=False)})
    with TestClient(create_app(off), raise_server_exceptions=False) as client:
        assert client.get("/metrics", headers=auth()).status_code == 404


def test_two_gateways_in_one_process_keep_their_own_counts(settings: Settings) -> None:
    with (
        TestClient(create_app(settings)) as first,
        TestClient(create_app(settings)) as second,
    ):
        first.post("/v1/executions", json=body("fs.list_dir", {"path": "."}), headers=auth())
        count = "toolgate_executions_total"
        assert (
            value(samples(first), count, tool="fs.list_dir", outcome="succeeded", error_phase="")
            == 1
        )
        assert (
            value(samples(second), count, tool="fs.list_dir", outcome="succeeded", error_phase="")
            == 0
        )
