"""The store goes away mid-flight (PostgreSQL backends killed with pg_terminate_backend):
the call ends truthfully (unknown or failed, never a made-up success), the gateway stays up,
and it works again once the store answers."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.testing import gateway, make_project, run_agent_code_without_approval
from tests.helpers import ALICE, pg_admin

pytestmark = pytest.mark.slow
HEADERS = {"Authorization": f"Bearer {ALICE}"}


def _kill_backends(database: str) -> int:
    with pg_admin() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return len(rows)


def test_postgres_connections_killed_mid_flight(tmp_path: Path, pg_url: str) -> None:
    config = make_project(tmp_path, pg_url)
    run_agent_code_without_approval(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["lock_lease"] = "2s"  # recovery passes every lease: keep the test short
    config.write_text(yaml.safe_dump(data))
    ws = tmp_path / "var" / "workspaces" / "demo"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "slow.py").write_text("import time\ntime.sleep(2)\nprint('done')\n")
    database = pg_url.rsplit("/", 1)[1]
    body = {
        "run_id": "outage",
        "call_id": "c1",
        "tool": {"name": "proc.python"},
        "arguments": {"script": "slow.py"},
        "actor": {"user_id": "alice", "agent_id": "t"},
        "workspace": {"id": "demo"},
    }
    with gateway(config) as url, httpx.Client(headers=HEADERS, timeout=60) as client:
        started = client.post(
            url + "/v1/executions", json=body, headers={"Prefer": "respond-async"}
        ).json()
        time.sleep(0.8)  # the script is running now
        assert _kill_backends(database) >= 1
        deadline = time.monotonic() + 60
        execution: dict = {}
        while time.monotonic() < deadline:
            response = client.get(url + started["links"]["self"] + "?wait=5")
            if response.status_code in (200, 202):
                execution = response.json()
                if execution["status"] == "completed":
                    break
            time.sleep(0.5)
        assert execution.get("status") == "completed", execution
        assert execution["result"]["outcome"] in ("succeeded", "unknown", "failed")
        if execution["result"]["outcome"] != "succeeded":
            assert execution["result"]["error"]["message"]
        assert client.get(url + "/readyz").status_code == 200
        again = client.post(url + "/v1/executions", json=dict(body, call_id="c2")).json()
        assert again["result"]["outcome"] == "succeeded"
