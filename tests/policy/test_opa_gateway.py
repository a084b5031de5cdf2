"""A real gateway (``toolgate serve``, policy_backend: opa) in front of the loopback OPA stand-in:
allowed calls carry OPA's decision_id; a stopped, slow or garbled OPA denies every call with a
clear error, runs nothing, leaves the gateway healthy, and logs one line per failure."""

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


def write(url: str, name: str) -> dict[str, Any]:
    response = httpx.post(
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
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


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
                "html": ((200, "text/html", b"<html/>"), 0.0, "text/html, not JSON"),
                "noresult": ((200, "application/json", b"{}"), 0.0, "is undefined"),
                "shape": ((200, "application/json", b'{"result": 1}'), 0.0, "malformed"),
                "slow": (None, 1.0, "did not answer within 200 ms"),
            }
            for name, (reply, delay, cause) in bad.items():
                Switchable.reply, Switchable.delay = reply, delay
                denied = write(url, name)
                assert denied["result"]["outcome"] == "failed", denied
                error = denied["result"]["error"]
                assert error["type"] == "policy_denied", error
                assert cause in error["message"], error
                assert not (workspace / f"notes/{name}.txt").exists()
            Switchable.reply, Switchable.delay = None, 0.0
            server.stop()
            stopped = write(url, "stopped")
            assert "cannot reach OPA" in stopped["result"]["error"]["message"]
            assert not (workspace / "notes/stopped.txt").exists()
            assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            server = Switchable.from_bundle(built.data, port=port).start()
            again = write(url, "again")
            assert again["result"]["outcome"] == "succeeded", again
        log = next(tmp_path.glob("gateway-*.log")).read_text()
        for kind in ("not_json", "undefined", "malformed", "timeout", "connection"):
            assert f"policy decision denied ({kind})" in log, log
    finally:
        server.stop()
