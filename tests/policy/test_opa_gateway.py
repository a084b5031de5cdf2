"""A real gateway (``toolgate serve``, policy_backend: opa) in front of the loopback OPA stand-in:
allowed calls carry OPA's decision_id; a stopped, slow or garbled OPA refuses every call
(503 policy_unavailable), a decision it gives that is unusable denies it; either way nothing
runs, the gateway stays up, and the log has one line per failure (tests/policy/
test_opa_outage.py has the refusal's other sides: MCP, /readyz, the metric)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.policy import bundle
from gateway.policy.loader import load_policy_sources
from gateway.policy.standin import StandIn
from gateway.testing import free_port, gateway, make_project

ALICE = "tg_dev_alice"
pytestmark = pytest.mark.slow


class Switchable(StandIn):
    """A stand-in whose behaviour the test changes between calls."""

    reply: tuple[int, str, bytes] | None = None
    delay = 0.0

    def answer(self, method: str, target: str, body: bytes) -> tuple[int, str, bytes]:
        if method == "POST" and self.delay:
            time.sleep(self.delay)
        if method == "POST" and self.reply is not None:
            return self.reply
        return super().answer(method, target, body)


def post(url: str, name: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/executions",
        json={
            "run_id": "opa-gateway",
            "call_id": name,
            "tool": {"name": "fs.write_file"},
            "arguments": {"path": f"notes/{name}.txt", "content": name},
            "workspace": {"id": "demo"},
        },
        headers={"Authorization": f"Bearer {ALICE}"},
        timeout=30,
    )


def write(url: str, name: str) -> dict[str, Any]:
    response = post(url, name)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def refused(url: str, name: str) -> None:
    response = post(url, name)
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "policy_unavailable", response.text


def decided(url: str, execution_id: str) -> dict[str, Any]:
    events = httpx.get(
        f"{url}/v1/executions/{execution_id}/events",
        headers={"Authorization": f"Bearer {ALICE}"},
        timeout=30,
    ).json()["items"]
    (event,) = [e for e in events if e["type"] == "policy.decided"]
    data: dict[str, Any] = event["data"]
    return data


def test_gateway_on_opa_allows_and_fails_closed(tmp_path: Path) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    workspace = tmp_path / "var/workspaces/demo"
    workspace.mkdir(parents=True, exist_ok=True)
    built = bundle.build(load_policy_sources(tmp_path / "rego", tmp_path / "policies"))
    port = free_port()
    server = Switchable.from_bundle(built.data, port=port).start()
    env = {
        "TOOLGATE_POLICY_BACKEND": "opa",
        "TOOLGATE_OPA_URL": f"http://127.0.0.1:{port}",
        "TOOLGATE_OPA_TIMEOUT": "200ms",
    }
    try:
        with gateway(config, env) as url:
            allowed = write(url, "allowed")
            assert allowed["result"]["outcome"] == "succeeded", allowed
            assert (workspace / "notes/allowed.txt").read_text() == "allowed"
            assert decided(url, allowed["id"])["decision_id"]

            bad = {
                "html": ((200, "text/html", b"<html/>"), 0.0, None),
                "noresult": ((200, "application/json", b"{}"), 0.0, "is undefined"),
                "shape": ((200, "application/json", b'{"result": 1}'), 0.0, "malformed"),
                "slow": (None, 1.0, None),
            }
            for name, (reply, delay, cause) in bad.items():
                Switchable.reply, Switchable.delay = reply, delay
                if cause is None:  # no decision from OPA: refused, retryable
                    refused(url, name)
                else:  # OPA's decision is unusable: denied, like the policy's own error
                    denied = write(url, name)
                    assert denied["result"]["outcome"] == "failed", denied
                    error = denied["result"]["error"]
                    assert error["type"] == "policy_denied", error
                    assert cause in error["message"], error
                assert not (workspace / f"notes/{name}.txt").exists()
            Switchable.reply, Switchable.delay = None, 0.0
            server.stop()
            refused(url, "stopped")
            assert not (workspace / "notes/stopped.txt").exists()
            assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            server = Switchable.from_bundle(built.data, port=port).start()
            again = write(url, "again")
            assert again["result"]["outcome"] == "succeeded", again
        log = next(tmp_path.glob("gateway-*.log")).read_text()
        for kind in ("undefined", "malformed"):
            assert f"policy decision denied ({kind})" in log, log
        for kind in ("not_json", "timeout", "connection"):
            assert f"policy decision refused ({kind})" in log, log
        assert "cannot reach OPA" in log and "did not answer within 200 ms" in log, log
    finally:
        server.stop()
