"""Fault injection against real gateway processes: crash at every named point, restart,
and check that nothing was lost, nothing happened twice, and the log tells the truth.

For each point x {file write (reconcilable), append (not reconcilable), batch write,
process run}: the gateway is started with ``TOOLGATE_FAULTS=<point>:crash``, one call is
sent (the gateway dies), the gateway is started again without faults, and then:

- the execution ends in the one outcome docs/failures.md ("Gateway crash") prescribes for
  that point and tool (``RECOVERED``), with the error ``interrupted`` when not ``succeeded``;
- the side effect happened exactly as often as that outcome says (once, or not at all);
- the event log replays to the state the store holds (its last ``tool.completed`` has the
  execution's outcome, sequence numbers are contiguous);
- a retry with the same idempotency key returns the recovered execution.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.faults import POINTS
from gateway.testing import gateway, make_project, run_agent_code_without_approval
from tests.helpers import ALICE, wait_until

HEADERS = {"Authorization": f"Bearer {ALICE}"}
_ids = itertools.count()

SCRIPT = """
import pathlib, sys
p = pathlib.Path("ran.txt")
p.write_text(p.read_text() + "x" if p.exists() else "x")
"""


def _call(tool: str) -> tuple[str, dict[str, Any]]:
    if tool == "write":
        return "fs.write_file", {"path": "w.txt", "content": "v1"}
    if tool == "append":
        return "fs.append_file", {"path": "a.txt", "content": "line\n"}
    if tool == "batch":
        files = [{"path": "b1.txt", "content": "1"}, {"path": "b2.txt", "content": "2"}]
        return "fs.write_files", {"files": files}
    return "proc.python", {"script": "bump.py"}


def _effects(tool: str, ws: Path) -> int:
    """How many times the side effect happened, as far as the workspace shows."""
    if tool == "write":
        return int((ws / "w.txt").exists())
    if tool == "append":
        return (ws / "a.txt").read_text().count("line") if (ws / "a.txt").exists() else 0
    if tool == "batch":
        return max(int((ws / "b1.txt").exists()), int((ws / "b2.txt").exists()))
    return len((ws / "ran.txt").read_text()) if (ws / "ran.txt").exists() else 0


# docs/failures.md, "Gateway crash": what recovery makes of a crash at each point. Only
# fs.write_file declares a reconcile probe; the others (append, batch, process) cannot tell.
RECOVERED: dict[str, dict[str, tuple[str, int]]] = {
    "after_reserve": dict.fromkeys(("write", "append", "batch", "process"), ("succeeded", 1)),
    "before_adapter": {"write": ("failed", 0)}
    | dict.fromkeys(("append", "batch", "process"), ("unknown", 0)),
    **{
        point: {"write": ("succeeded", 1)}
        | dict.fromkeys(("append", "batch", "process"), ("unknown", 1))
        for point in ("after_side_effect", "during_verify", "before_commit")
    },
    "after_commit": dict.fromkeys(("write", "append", "batch", "process"), ("succeeded", 1)),
}
"""(outcome, how many times the side effect happened) per crash point and tool."""


def test_every_fault_point_has_its_prescribed_recovery() -> None:
    assert set(RECOVERED) == POINTS


@pytest.mark.slow  # starts its gateways itself, two per case
@pytest.mark.parametrize("tool", ["write", "append", "batch", "process"])
@pytest.mark.parametrize("point", sorted(POINTS))
def test_crash_then_recover(tmp_path: Path, point: str, tool: str) -> None:
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    run_agent_code_without_approval(tmp_path)
    ws = tmp_path / "var" / "workspaces" / "demo"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "bump.py").write_text(SCRIPT)
    name, arguments = _call(tool)
    key = f"k-{next(_ids)}"
    body = {
        "run_id": "faults",
        "call_id": key,
        "tool": {"name": name},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "t"},
        "workspace": {"id": "demo"},
        "idempotency_key": key,
    }
    with (
        gateway(config, env={"TOOLGATE_FAULTS": f"{point}:crash"}) as url,
        pytest.raises(httpx.HTTPError),
    ):
        httpx.post(url + "/v1/executions", json=body, headers=HEADERS, timeout=30)
    with gateway(config, env={"TOOLGATE_FAULTS": ""}) as url:
        found = httpx.get(
            url + f"/v1/executions?run_id=faults&call_id={key}", headers=HEADERS, timeout=10
        ).json()["items"]
        assert len(found) == 1, found

        def completed() -> dict[str, Any] | None:
            answer = httpx.get(url + found[0]["links"]["self"] + "?wait=5", headers=HEADERS)
            return answer.json() if answer.json()["status"] == "completed" else None

        execution = wait_until(completed, "the recovered call to complete")
        result = execution["result"]
        outcome, effects = RECOVERED[point][tool]
        assert result["outcome"] == outcome, result
        if outcome != "succeeded":
            assert result["error"]["type"] == "interrupted" and result["error"]["message"], result
        assert _effects(tool, ws) == effects
        events = httpx.get(url + execution["links"]["events"], headers=HEADERS).json()["items"]
        assert [e["seq"] for e in events] == list(range(len(events)))
        completed = [e for e in events if e["type"] == "tool.completed"]
        assert completed and completed[-1]["data"]["outcome"] == result["outcome"]
        assert sum(e["type"] == "tool.started" for e in events) == 1
        retry = httpx.post(
            url + "/v1/executions",
            json=dict(body, call_id=key + "-retry"),
            headers=HEADERS,
            timeout=30,
        )
        assert retry.status_code == 200, retry.text
        assert retry.json()["id"] == execution["id"]
        assert retry.json()["result"] == result
        assert _effects(tool, ws) == effects
