"""Approval notifications from a real gateway process to a real receiver on 127.0.0.1
(docs/operations.md#approval-notifications).

- An approval requested, then approved, is POSTed to the endpoint; each signature verifies
  with an independent implementation of Standard Webhooks (hmac + base64, here); the receiver
  answers 500 first and the same message (same ``webhook-id``) comes again; the payload names
  the approval's page on ``public_url`` and the call, with the masked argument as ``***`` and
  the secret nowhere; a chat endpoint gets its template's body.
- An endpoint on an address egress control refuses is never contacted: its delivery is
  dead-lettered with a log line, and counted.
- An approval withdrawn (its call cancelled) is POSTed as ``approval.withdrawn``.
- A delivery pending when the gateway stops is sent by the next gateway on that store.
- ``toolgate check`` refuses an endpoint egress would always refuse, and a missing secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.testing import free_port, gateway, make_project
from tests.helpers import ALICE, BOB, wait_until
from tests.server.helpers import body as call_body

pytestmark = pytest.mark.slow
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
LEAKED = "sk_live_0123456789abcdefSECRET"
PUBLIC = "https://toolgate.example.com"


class Receiver:
    """A webhook receiver: records every POST (path, headers, raw body) and answers with the
    next of ``answers[path]``, then 204."""

    def __init__(self, answers: dict[str, list[int]] | None = None, port: int = 0) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.answers = answers or {}
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.changed:
                    receiver.requests.append((self.path, headers, raw))
                    queued = receiver.answers.get(self.path)
                    status = queued.pop(0) if queued else 204
                    receiver.changed.notify_all()
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait(
        self, until: Callable[[list[tuple[str, dict[str, str], bytes]]], bool], what: str
    ) -> list[tuple[str, dict[str, str], bytes]]:
        with self.changed:
            if not self.changed.wait_for(lambda: until(self.requests), timeout=60):
                raise AssertionError(f"the receiver never saw {what}: {self.requests}")
            return list(self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def verified(headers: dict[str, str], raw: bytes, secret: str = SECRET) -> dict[str, Any]:
    """The payload, once its signature verifies as Standard Webhooks says (an implementation
    of the spec's own, independent of the gateway's)."""
    msg_id, stamp = headers["webhook-id"], headers["webhook-timestamp"]
    assert abs(time.time() - int(stamp)) < 300  # within the spec's tolerance
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(
        hmac.new(key, f"{msg_id}.{stamp}.".encode() + raw, hashlib.sha256).digest()
    ).decode()
    given = [s.split(",", 1)[1] for s in headers["webhook-signature"].split() if "," in s]
    assert any(hmac.compare_digest(expected, s) for s in given), headers
    return dict(json.loads(raw))


def project(root: Path, endpoints: list[dict[str, Any]]) -> Path:
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    data = yaml.safe_load(config.read_text())
    data["public_url"] = PUBLIC
    data["policy_input_mask"] = ["arguments.stdin"]
    data["notifications"] = {
        "endpoints": endpoints,
        "retry_initial": "0.2s",
        "retry_max": "1s",
        "poll_interval": "0.1s",
        "timeout": "5s",
    }
    config.write_text(yaml.safe_dump(data))
    (root / "var" / "workspaces" / "demo").mkdir(parents=True, exist_ok=True)
    return config


def park(url: str) -> dict[str, Any]:
    """A call of proc.python (it runs agent code: a person approves it), with a secret in
    its stdin; parked: its approval, with its ``execution_id``."""
    call = call_body("proc.python", {"script": "job.py", "stdin": f"API_KEY={LEAKED}\n"})
    answer = httpx.post(
        f"{url}/v1/executions", json=call, headers={"Authorization": f"Bearer {ALICE}"}
    )
    parked = answer.json()
    assert parked["status"] == "awaiting_approval", parked
    return {**parked["approval"], "execution_id": parked["id"]}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(answers={"/hook": [500]})
    yield found
    found.close()


@pytest.fixture
def refused() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


SLACK = '{"text": "Approval needed: $tool $version for $requester: $reasons. Decide at $page_url"}'


def test_an_approval_is_notified_signed_retried_and_without_its_secret(
    tmp_path: Path, receiver: Receiver, refused: Receiver
) -> None:
    config = project(
        tmp_path,
        [
            {"url": receiver.url("/hook"), "secret_env": "WH", "allow_networks": ["127.0.0.1"]},
            {
                "url": receiver.url("/slack"),
                "secret_env": "WH",
                "events": ["approval.requested"],
                "template": SLACK,
                "allow_networks": ["127.0.0.1/32"],
            },
            {"url": refused.url("/hook"), "secret_env": "WH"},  # loopback, not allowed
        ],
    )
    with gateway(config, env={"WH": SECRET}) as url:
        approval = park(url)
        page = f"{PUBLIC}/ui/approvals/{approval['id']}"

        def hooks(seen: list[tuple[str, dict[str, str], bytes]]) -> list[Any]:
            return [(h, raw) for path, h, raw in seen if path == "/hook"]

        seen = receiver.wait(lambda r: len(hooks(r)) >= 2, "the request notified again")
        (first, first_raw), (second, second_raw) = hooks(seen)[:2]
        assert first["webhook-id"] == second["webhook-id"]  # the same message, retried
        requested = verified(second, second_raw)
        assert verified(first, first_raw) == requested
        assert requested["type"] == "approval.requested"
        data = requested["data"]
        assert data["approval_id"] == approval["id"] and data["page_url"] == page
        assert data["tool"] == {"name": "proc.python", "version": "1.0.0"}
        assert data["requested_by"] == "alice" and data["workspace"] == "demo"
        assert data["reasons"] and data["status"] == "pending"
        assert data["arguments"]["stdin"] == "***" and data["arguments"]["script"] == "job.py"

        decided = httpx.post(
            f"{url}/v1/approvals/{approval['id']}/approve",
            json={"resume": False},
            headers={"Authorization": f"Bearer {BOB}"},
        )
        assert decided.status_code == 200, decided.text
        seen = receiver.wait(
            lambda r: any(b'"approval.approved"' in raw for _, raw in hooks(r)), "the decision"
        )
        approved = [verified(h, raw) for h, raw in hooks(seen) if b"approval.approved" in raw]
        assert approved[0]["data"]["decided_by"] == "bob"
        assert approved[0]["data"]["status"] == "approved"

        slack = [(h, raw) for path, h, raw in seen if path == "/slack"]
        assert len(slack) == 1  # approval.requested only
        text = verified(*slack[0])["text"]
        assert text.startswith("Approval needed: proc.python 1.0.0 for alice") and page in text
        assert all(LEAKED not in raw.decode() for _, _, raw in seen)

        log = next(tmp_path.glob("gateway-*.log"))
        wait_until(lambda: b"egress control refused" in log.read_bytes(), "the refusal logged")
        assert refused.requests == []  # never contacted

        def scraped() -> str:
            auth = {"Authorization": f"Bearer {ALICE}"}
            return httpx.get(f"{url}/metrics", headers=auth).text

        # both events to the refused endpoint, dead at once; 3 delivered after 1 retry
        wait_until(lambda: 'notifications_total{outcome="refused"} 2.0' in scraped(), "2 refused")
        metrics = scraped()
        assert 'toolgate_notifications_total{outcome="delivered"} 3.0' in metrics
        assert 'toolgate_notifications_total{outcome="retry"} 1.0' in metrics
    line = next(x for x in log.read_text().splitlines() if "egress control refused" in x)
    assert refused.url("/hook") in line and "dead-lettered" in line


def test_an_approval_withdrawn_by_a_cancel_is_notified(tmp_path: Path, receiver: Receiver) -> None:
    # the channel told "pending" is told the approval is gone when its call is cancelled
    hook = {"url": receiver.url("/told"), "secret_env": "WH", "allow_networks": ["127.0.0.1"]}
    config = project(tmp_path, [hook])
    with gateway(config, env={"WH": SECRET}) as url:
        approval = park(url)
        receiver.wait(lambda r: len(r) >= 1, "the request")
        cancelled = httpx.post(
            f"{url}/v1/executions/{approval['execution_id']}/cancel",
            headers={"Authorization": f"Bearer {ALICE}"},
        )
        assert cancelled.status_code == 200, cancelled.text
        seen = receiver.wait(lambda r: len(r) >= 2, "the withdrawal")
    told = [verified(headers, raw) for _, headers, raw in seen]
    gone = {"type": "approval.withdrawn", "approval_id": approval["id"], "status": "withdrawn"}
    assert [
        {"type": t["type"], "approval_id": t["data"]["approval_id"], "status": t["data"]["status"]}
        for t in told
    ][1:] == [gone]


def test_a_pending_delivery_survives_a_restart(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there yet: every attempt fails and is retried
    config = project(
        tmp_path,
        [
            {
                "url": f"http://127.0.0.1:{port}/hook",
                "secret_env": "WH",
                "allow_networks": ["127.0.0.1"],
            }
        ],
    )
    with gateway(config, env={"WH": SECRET}) as url:
        approval = park(url)
        log = next(tmp_path.glob("gateway-*.log"))
        wait_until(lambda: b"will retry" in log.read_bytes(), "a failed attempt")
    with sqlite3.connect(tmp_path / "toolgate.db") as db:
        ((msg_id, status),) = db.execute("SELECT id, status FROM notifications").fetchall()
    assert status == "pending"

    receiver = Receiver(port=port)
    try:
        with gateway(config, env={"WH": SECRET}):
            seen = receiver.wait(lambda r: len(r) >= 1, "the delivery after the restart")
        _, headers, raw = seen[0]
        assert headers["webhook-id"] == msg_id
        assert verified(headers, raw)["data"]["approval_id"] == approval["id"]
    finally:
        receiver.close()
    with sqlite3.connect(tmp_path / "toolgate.db") as db:
        assert db.execute("SELECT status FROM notifications").fetchall() == [("delivered",)]


def test_check_refuses_an_endpoint_egress_always_refuses(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        [
            {"url": "http://127.0.0.1:9/hook", "secret_env": "WH"},
            {
                "url": "http://169.254.169.254/x",
                "secret_env": "WH",
                "allow_networks": ["169.254.0.0/16"],
            },
            {"url": "https://hooks.example.com/x", "secret_env": "WH_MISSING"},
        ],
    )
    env = {k: v for k, v in os.environ.items() if k != "WH_MISSING"}
    checked = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--config", str(config), "check"],
        capture_output=True,
        text=True,
        env={**env, "WH": SECRET},
        cwd=tmp_path,
    )
    assert checked.returncode != 0
    out = checked.stdout + checked.stderr
    assert "notifications.endpoints[0].url" in out and "loopback" in out
    assert "notifications.endpoints[1].url" in out and "cloud metadata" in out
    assert "notifications.endpoints[2].secret_env" in out and "WH_MISSING" in out
    assert "Traceback" not in out


def test_serve_refuses_an_endpoint_whose_secret_is_not_set(tmp_path: Path) -> None:
    config = project(tmp_path, [{"url": "https://hooks.example.com/x", "secret_env": "WH_UNSET"}])
    served = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--config", str(config), "serve", "--port", "0"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "WH_UNSET"},
        cwd=tmp_path,
        timeout=120,
    )
    assert served.returncode != 0
    out = served.stdout + served.stderr
    assert "notifications.endpoints[0].secret_env: the variable WH_UNSET is not set" in out
    assert "Traceback" not in out and "listening" not in out
