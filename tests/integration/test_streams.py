"""Live event streams (SSE) against real gateway processes sharing one store: an event
committed by the second gateway reaches a stream served by the first; ``Last-Event-ID``
resumes without gaps or duplicates; the stream ends at the terminal event, or, for an
``unknown`` outcome, at a person's ``outcome.resolved``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.testing import gateway, make_project, run_agent_code_without_approval
from tests.helpers import ALICE, BOB, unknown_call, wait_until

pytestmark = [pytest.mark.slow]
STREAM = {"Accept": "text/event-stream"}


def _auth(key: str = ALICE) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _messages(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The SSE messages of a streaming response (comments counted as ``comment``)."""
    message: dict[str, Any] = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            yield {"comment": line}
        elif not line:
            if "data" in message:
                message["json"] = json.loads(message["data"])
                yield message
            message = {}
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            message[field] = message[field] + "\n" + value if field in message else value


def _park(url: str, workspace: Path, call_id: str) -> dict[str, Any]:
    (workspace / f"{call_id}.txt").write_text("bye")
    body = {
        "run_id": "stream-run",
        "call_id": call_id,
        "tool": {"name": "fs.delete_file"},
        "arguments": {"path": f"{call_id}.txt"},
        "actor": {"user_id": "alice", "agent_id": "t"},
        "workspace": {"id": "demo"},
        "idempotency_key": call_id,
    }
    response = httpx.post(url + "/v1/executions", json=body, headers=_auth(), timeout=30)
    assert response.status_code == 202, response.text
    return dict(response.json())


def _config(tmp_path: Path, database_url: str, **settings: Any) -> Path:
    config = make_project(tmp_path, database_url)
    data = yaml.safe_load(config.read_text())
    data.update({"stream_poll_interval": 0.05, "stream_heartbeat": 0.2, **settings})
    config.write_text(yaml.safe_dump(data))
    return config


def test_a_stream_delivers_what_another_gateway_commits(tmp_path: Path, database_url: str) -> None:
    config = _config(tmp_path, database_url)
    workspace = tmp_path / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    with gateway(config) as first, gateway(config) as second:
        parked = _park(first, workspace, "c1")
        events_url = first + parked["links"]["events"]
        seen: list[dict[str, Any]] = []
        comments = 0
        with (
            httpx.Client(timeout=30) as client,
            client.stream("GET", events_url, headers={**_auth(), **STREAM}) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for message in _messages(response):
                if "comment" in message:
                    comments += 1
                    if comments == 2:  # parked and quiet: decide through the other door
                        approval = parked["approval"]["id"]
                        decided = httpx.post(
                            f"{second}/v1/approvals/{approval}/approve", headers=_auth(BOB)
                        )
                        assert decided.status_code == 202, decided.text
                    continue
                seen.append(message)
        # the stream ended by itself after the terminal event
        types = [m["event"] for m in seen]
        assert types[-1] == "tool.completed" and "approval.resolved" in types, types
        assert [int(m["id"]) for m in seen] == list(range(len(seen)))  # no gap, no duplicate
        assert [m["json"]["seq"] for m in seen] == list(range(len(seen)))
        assert not (workspace / "c1.txt").exists()

        # resume after seq 2: the rest, once each; a completed execution's stream ends
        headers = {**_auth(), **STREAM, "Last-Event-ID": "2"}
        with httpx.stream("GET", events_url, headers=headers, timeout=30) as response:
            rest = [m for m in _messages(response) if "comment" not in m]
        assert [m["id"] for m in rest] == [m["id"] for m in seen[3:]]

        # the run's stream: every execution's events, and it ends once all have ended
        run_url = first + "/v1/runs/stream-run/events"
        with httpx.stream("GET", run_url, headers={**_auth(), **STREAM}, timeout=30) as response:
            run = [m for m in _messages(response) if "comment" not in m]
        assert [m["json"]["id"] for m in run] == [m["json"]["id"] for m in seen]
        assert run[-1]["id"] == f"{parked['id']}:{len(seen) - 1}"
        with httpx.stream(
            "GET", run_url, headers={**_auth(), **STREAM, "Last-Event-ID": run[3]["id"]}
        ) as response:
            resumed = [m for m in _messages(response) if "comment" not in m]
        assert [m["json"]["seq"] for m in resumed] == list(range(4, len(seen)))
        listed = httpx.get(run_url, headers=_auth()).json()["items"]
        assert [e["id"] for e in listed] == [m["json"]["id"] for m in seen]


def test_streams_are_bounded_and_checked(tmp_path: Path, database_url: str) -> None:
    config = _config(tmp_path, database_url, max_streams_per_principal=1)
    workspace = tmp_path / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    with gateway(config) as url:
        parked = _park(url, workspace, "c2")
        events_url = url + parked["links"]["events"]
        anonymous = httpx.get(events_url, headers=STREAM)
        assert anonymous.status_code == 401
        bad = httpx.get(events_url, headers={**_auth(), **STREAM, "Last-Event-ID": "x"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_last_event_id"
        bad_run = httpx.get(
            url + "/v1/runs/stream-run/events",
            headers={**_auth(), **STREAM, "Last-Event-ID": "nocolon"},
        )
        assert bad_run.status_code == 400 and bad_run.json()["code"] == "invalid_last_event_id"
        with httpx.stream("GET", events_url, headers={**_auth(), **STREAM}, timeout=30) as held:
            assert held.status_code == 200
            second = httpx.get(events_url, headers={**_auth(), **STREAM})
            assert second.status_code == 429 and second.json()["code"] == "too_many_streams"

        # the slot is given back once the first stream is closed
        def opened() -> bool:
            with httpx.stream("GET", events_url, headers={**_auth(), **STREAM}) as third:
                return third.status_code == 200

        wait_until(opened, "a third stream to be admitted", limit=10)


def _unknown(url: str, workspace: Path, run_id: str) -> dict[str, Any]:
    """A completed execution whose outcome is ``unknown`` (``unknown_call``)."""
    body = unknown_call(workspace, run_id, "c1", 1000)
    created = httpx.post(url + "/v1/executions", json=body, headers=_auth(), timeout=30).json()
    done = httpx.get(url + created["links"]["self"] + "?wait=30", headers=_auth(), timeout=40)
    assert done.json()["result"]["outcome"] == "unknown", done.text
    return dict(done.json())


def _follow_until_resolved(url: str, stream_url: str, execution: dict[str, Any]) -> list[str]:
    """The event types of ``stream_url`` read to its end, the execution resolved (over REST,
    by an approver) once the stream has sent its ``tool.completed`` and stays open."""
    types: list[str] = []
    with httpx.stream("GET", stream_url, headers={**_auth(), **STREAM}, timeout=30) as response:
        assert response.status_code == 200
        for message in _messages(response):
            if "comment" in message:
                continue
            types.append(message["event"])
            if message["event"] == "tool.completed":
                resolved = httpx.post(
                    url + execution["links"]["self"] + "/resolve",
                    json={"outcome": "succeeded", "note": "hung.txt holds the write"},
                    headers=_auth(BOB),
                )
                assert resolved.status_code == 200, resolved.text
    return types


def test_an_unknown_outcome_streams_until_a_person_resolves_it(
    tmp_path: Path, database_url: str
) -> None:
    """An ``unknown`` outcome is not the end of its log: the stream of the execution, and of
    its run, stays open after ``tool.completed`` and ends after ``outcome.resolved``; once
    resolved (settled), a stream sends the log and ends at once."""
    config = _config(tmp_path, database_url)
    run_agent_code_without_approval(tmp_path)
    workspace = tmp_path / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    with gateway(config) as url:
        alone = _unknown(url, workspace, "unknown-run-1")
        types = _follow_until_resolved(url, url + alone["links"]["events"], alone)
        assert types[-2:] == ["tool.completed", "outcome.resolved"], types
        in_run = _unknown(url, workspace, "unknown-run-2")
        run_types = _follow_until_resolved(url, url + "/v1/runs/unknown-run-2/events", in_run)
        assert run_types[-2:] == ["tool.completed", "outcome.resolved"], run_types

        # settled: the whole log, and the end, without waiting for anything
        with httpx.stream(
            "GET", url + alone["links"]["events"], headers={**_auth(), **STREAM}, timeout=30
        ) as response:
            again = [m["event"] for m in _messages(response) if "comment" not in m]
        assert again == types
