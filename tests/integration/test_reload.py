"""Hot reload against real gateway processes (``toolgate serve``).

- ``SIGHUP``: a valid change (a tool removed from tools.d, a policy rule changed) takes effect
  for new calls, while a call started before (a process tool waiting on a file) finishes on
  the generation it started on, with that generation's revisions in its events; a broken
  YAML then changes nothing and the fault is in the log; a broken Rego sent through
  ``POST /v1/admin/reload`` (and ``toolgate reload``) is refused with the fault in the
  answer.
- Two replicas on one PostgreSQL database, given the same change (one by ``SIGHUP``, the other
  by the admin route), report the same new revisions on ``/readyz``.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml

from gateway.cli import main
from gateway.store.store import Store
from gateway.testing import (
    free_port,
    make_project,
    run_agent_code_without_approval,
    serve,
    stop,
    wait_healthy,
)
from tests.helpers import ALICE, CAROL, wait_until

pytestmark = [pytest.mark.slow]
ALICE_H = {"Authorization": f"Bearer {ALICE}"}
CAROL_H = {"Authorization": f"Bearer {CAROL}"}
WAITER = (
    "import pathlib, time\n"
    "while not pathlib.Path('go').exists():\n"
    "    time.sleep(0.05)\n"
    "print('went')\n"
)


@contextmanager
def _gateways(*configs: Path) -> Iterator[list[tuple[str, subprocess.Popen[bytes], Path]]]:
    """Gateway processes, started together: for each its URL, the process (to signal) and
    its log file."""
    started: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        for config in configs:
            port = free_port()
            log_path = config.parent / f"gateway-{port}.log"
            with log_path.open("wb") as log:
                started.append((f"http://127.0.0.1:{port}", serve(config, port, log), log_path))
        for url, proc, _ in started:
            wait_healthy(url, proc)
        yield started
    finally:
        for _, proc, _ in started:
            stop(proc)


def _project(root: Path, database_url: str) -> Path:
    config = make_project(root, database_url)
    run_agent_code_without_approval(root)
    settings = yaml.safe_load(config.read_text())
    settings["admins"] = ["carol"]
    config.write_text(yaml.safe_dump(settings))
    return config


def _call(tool: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "run_id": "reload",
        "call_id": call_id,
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "t"},
        "workspace": {"id": "demo"},
    }


async def _create_schema(database_url: str) -> None:
    store = Store(database_url)
    await store.open()
    await store.aclose()


def _revisions(url: str) -> dict[str, str]:
    revisions: dict[str, str] = httpx.get(url + "/readyz", timeout=5).json()["revisions"]
    return revisions


def _change(root: Path) -> None:
    """A valid change: proc.python leaves tools.d; fs.write_file now needs an approval."""
    (root / "tools.d" / "proc.python.yaml").unlink()
    rules = root / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    data.setdefault("tool_overrides", {})["fs.write_file"] = {"approval": True}
    rules.write_text(yaml.safe_dump(data))


def test_sighup_reloads_while_a_call_in_flight_keeps_its_generation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    workspace = tmp_path / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "wait.py").write_text(WAITER)
    with _gateways(config) as [(url, proc, log)], httpx.Client(base_url=url, timeout=30) as client:
        before = _revisions(url)
        started = client.post(
            "/v1/executions",
            json=_call("proc.python", {"script": "wait.py"}, "slow"),
            headers={**ALICE_H, "Prefer": "respond-async"},
        )
        assert started.status_code == 202, started.text
        slow = started.json()["id"]

        def running() -> bool:
            items = client.get(f"/v1/executions/{slow}/events", headers=ALICE_H).json()["items"]
            return any(e["type"] == "tool.started" for e in items)

        wait_until(running, "the slow call to start")
        _change(tmp_path)
        proc.send_signal(signal.SIGHUP)
        after = wait_until(lambda: (r := _revisions(url)) != before and r, "the reload")
        assert after["catalogue"] != before["catalogue"] and after["policy"] != before["policy"]

        gone = client.post(
            "/v1/executions",
            json=_call("proc.python", {"script": "wait.py"}, "gone"),
            headers=ALICE_H,
        ).json()
        assert gone["result"]["error"]["type"] == "tool_not_found"
        parked = client.post(
            "/v1/executions",
            json=_call("fs.write_file", {"path": "a.txt", "content": "x"}, "parked"),
            headers=ALICE_H,
        )
        assert parked.json()["status"] == "awaiting_approval"

        (workspace / "go").write_text("")
        done = client.get(f"/v1/executions/{slow}", params={"wait": 30}, headers=ALICE_H).json()
        assert done["result"]["outcome"] == "succeeded", done
        assert "went" in done["result"]["data"]["stdout"]
        events = client.get(f"/v1/executions/{slow}/events", headers=ALICE_H).json()["items"]
        stamped = [e["data"]["revisions"] for e in events if "revisions" in e["data"]]
        assert stamped and all(r == before for r in stamped)  # requested and dequeued legs

        (tmp_path / "tools.d" / "fs.broken.yaml").write_text("name: [fs.broken\n")
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: b"refused" in log.read_bytes(), "the refusal in the log")
        assert b"fs.broken.yaml" in log.read_bytes()
        assert _revisions(url) == after
        (tmp_path / "tools.d" / "fs.broken.yaml").unlink()

        (tmp_path / "rego" / "broken.rego").write_text("package toolgate\n\nbroken if {\n")
        refused = client.post("/v1/admin/reload", headers=CAROL_H)
        assert refused.status_code == 422
        assert any("broken.rego" in fault for fault in refused.json()["faults"])
        assert _revisions(url) == after

        def toolgate_reload() -> tuple[int, str]:
            code = main(["--config", str(config), "reload", "--url", url, "--key", CAROL])
            return code, capsys.readouterr().out

        code, out = toolgate_reload()  # the CLI: the same refusal, exit code 1
        assert code == 1 and json.loads(out)["code"] == "reload_refused" and "broken.rego" in out
        (tmp_path / "rego" / "broken.rego").unlink()
        code, out = toolgate_reload()
        assert code == 0 and json.loads(out)["status"] == "unchanged"
        assert proc.poll() is None


@pytest.mark.postgres
def test_two_replicas_reloading_converge_on_the_same_revisions(tmp_path: Path, pg_url: str) -> None:
    roots = [tmp_path / "a", tmp_path / "b"]  # two copies: the paths differ, the files do not
    configs = [_project(root, pg_url) for root in roots]
    anyio.run(_create_schema, pg_url)  # so that the two can start at once (no schema race)
    with _gateways(*configs) as [(first, proc, _), (second, _, _)]:
        before = _revisions(first)
        assert _revisions(second) == before
        for root in roots:
            _change(root)
        proc.send_signal(signal.SIGHUP)
        answer = httpx.post(second + "/v1/admin/reload", headers=CAROL_H, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "applied"
        after = answer.json()["revisions"]
        assert after != before
        wait_until(lambda: _revisions(first) == after, "the first replica to converge")
        assert _revisions(second) == after


KB_TOOL = """\
name: db.kb_count
version: 1.0.0
description: Count the notes of the knowledge base.
adapter: database
operation: query
connection: kb
risk: low
side_effect: read
sql: SELECT count(*) AS n FROM notes
idempotency: none
"""


def test_a_database_connection_added_to_toolgate_yaml_is_reloaded(tmp_path: Path) -> None:
    """Issue 29.3: a connection added to toolgate.yaml with a tool that uses it, then
    SIGHUP: the reload applies the adapters' sections (it refused before: "connection 'kb'
    is not declared"), and names a changed key that needs a restart instead of applying it."""
    config = _project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    with sqlite3.connect(tmp_path / "kb.db") as db:
        db.executescript(
            "CREATE TABLE notes (id INTEGER PRIMARY KEY); INSERT INTO notes VALUES (1)"
        )
    with _gateways(config) as [(url, proc, log)], httpx.Client(base_url=url, timeout=30) as client:
        before = client.get("/readyz").json()["generation"]
        settings = yaml.safe_load(config.read_text())
        settings["adapters"]["database"]["connections"]["kb"] = {"url": "sqlite:///kb.db"}
        config.write_text(yaml.safe_dump(settings))
        (tmp_path / "tools.d" / "db.kb_count.yaml").write_text(KB_TOOL)
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: client.get("/readyz").json()["generation"] > before, "the reload")
        done = client.post("/v1/executions", json=_call("db.kb_count", {}, "kb"), headers=ALICE_H)
        assert done.json()["result"]["outcome"] == "succeeded", done.text
        assert done.json()["result"]["data"]["rows"] == [{"n": 1}]
        assert b"toolgate.yaml applied: adapters" in log.read_bytes()

        settings["max_body_bytes"] = "2MiB"
        config.write_text(yaml.safe_dump(settings))
        answer = client.post("/v1/admin/reload", headers=CAROL_H).json()
        assert answer["status"] == "unchanged", answer
        assert answer["restart_needed"] == ["max_body_bytes"]
        assert answer["settings_applied"] == []
