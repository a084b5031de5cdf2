"""GET /v1/runs/{run_id}/events: a run's events a page at a time, followed by its cursor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.service.executions import PAGE_BYTES, PAGE_EVENTS
from gateway.settings import Settings
from gateway.testing import run_agent_code_without_approval
from tests.helpers import ALICE, BOB, CAROL
from tests.server.helpers import auth, body, follow_pages

Page = dict[str, Any]


def _call(client: TestClient, run: str, key: str = ALICE) -> str:
    """A completed write in ``run`` by the principal of ``key``; its execution id."""
    sent = body("fs.write_file", {"path": f"{run}.txt", "content": "x"}, run_id=run)
    sent["actor"]["user_id"] = key.removeprefix("tg_dev_")
    done = client.post("/v1/executions", json=sent, headers=auth(key))
    assert done.status_code == 200, done.text
    execution_id: str = done.json()["id"]
    return execution_id


def _log(client: TestClient, execution_id: str) -> list[Page]:
    """One execution's whole log, as its own route gives it."""
    answer = client.get(f"/v1/executions/{execution_id}/events", headers=auth())
    assert answer.status_code == 200, answer.text
    items: list[Page] = answer.json()["items"]
    return items


def _data_bytes(event: Page) -> int:
    """An event's data as the store keeps it (compact JSON, non-ASCII escaped)."""
    return len(json.dumps(event["data"], separators=(",", ":")))


def test_a_run_larger_than_a_page_is_read_whole_by_following_next(client: TestClient) -> None:
    made = [_call(client, "paged") for _ in range(30)]
    whole = [event for execution_id in made for event in _log(client, execution_id)]
    assert len(whole) > PAGE_EVENTS  # more than one page

    pages = follow_pages(client, "/v1/runs/paged/events")
    got = [event for page in pages for event in page["items"]]
    assert got == whole  # in order, each execution's log in turn: nothing lost or doubled
    assert [len(p["items"]) for p in pages] == [PAGE_EVENTS, len(whole) - PAGE_EVENTS]
    first, last = pages
    assert first["next"] == f"/v1/runs/paged/events?after={first['cursor']}"
    assert last["next"] is None
    # the cursor names the last seq sent of each execution, in the run's order
    ends = {e["execution_id"]: e["seq"] for e in whole}
    assert last["cursor"] == ",".join(f"{ex}:{ends[ex]}" for ex in made)
    again = client.get("/v1/runs/paged/events", params={"after": last["cursor"]}, headers=auth())
    assert again.json() == {"run_id": "paged", "items": [], "cursor": last["cursor"], "next": None}


def test_a_page_holds_at_most_its_bytes_of_event_data(
    settings: Settings, project: Path, workspace_root: Path
) -> None:
    run_agent_code_without_approval(project)
    (workspace_root / "loud.py").write_text("print(('x' * 1023 + '\\n') * 256, end='')\n")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        made = []
        for _ in range(5):  # 256 KiB of output each: more than a page's bytes together
            sent = body("proc.python", {"script": "loud.py"}, run_id="loud")
            done = client.post("/v1/executions", json=sent, headers=auth())
            assert done.json()["result"]["outcome"] == "succeeded", done.text
            made.append(done.json()["id"])
        whole = [event for execution_id in made for event in _log(client, execution_id)]
        assert len(whole) < PAGE_EVENTS and sum(map(_data_bytes, whole)) > PAGE_BYTES

        pages = follow_pages(client, "/v1/runs/loud/events")
    assert [event for page in pages for event in page["items"]] == whole
    assert len(pages) > 1
    for page in pages:
        size = sum(_data_bytes(event) for event in page["items"])
        assert size <= PAGE_BYTES or len(page["items"]) == 1, (size, len(page["items"]))


def test_events_a_page_passed_by_come_on_the_next_page(client: TestClient) -> None:
    """The cursor keeps each execution's place: an execution the first page read to its
    end that goes on (approved after it parked) is continued, not skipped."""
    parked = client.post(
        "/v1/executions",
        json=body("fs.delete_file", {"path": "gone.txt"}, run_id="live", idempotency_key="k"),
        headers=auth(),
    ).json()
    assert parked["status"] == "awaiting_approval", parked
    made = [_call(client, "live") for _ in range(30)]
    first = client.get("/v1/runs/live/events", headers=auth()).json()
    assert first["items"][: len(_log(client, parked["id"]))] == _log(client, parked["id"])

    approved = client.post(
        f"/v1/approvals/{parked['approval']['id']}/approve", json={}, headers=auth(BOB)
    )
    assert approved.status_code == 202, approved.text
    client.get(f"/v1/executions/{parked['id']}", params={"wait": "10"}, headers=auth())
    rest = follow_pages(client, first["next"])
    got = first["items"] + [event for page in rest for event in page["items"]]

    logs = {ex: _log(client, ex) for ex in [parked["id"], *made]}
    assert sorted(got, key=lambda e: e["id"]) == sorted(
        (e for log in logs.values() for e in log), key=lambda e: e["id"]
    )  # every event once
    resumed = [e for e in logs[parked["id"]] if e not in first["items"]]
    assert resumed and rest[0]["items"][: len(resumed)] == resumed  # first on the next page


def test_another_principals_executions_in_the_run_stay_hidden(client: TestClient) -> None:
    alices = [_call(client, "shared"), _call(client, "shared")]
    carols = _call(client, "shared", CAROL)
    mine = [event for execution_id in alices for event in _log(client, execution_id)]

    pages = follow_pages(client, "/v1/runs/shared/events")
    assert [event for page in pages for event in page["items"]] == mine
    assert carols not in json.dumps(pages)
    # a cursor naming carol's execution reads nothing of it, and is not given back
    peek = client.get(
        "/v1/runs/shared/events", params={"after": f"{carols}:0"}, headers=auth()
    ).json()
    assert peek["items"] == mine and carols not in json.dumps(peek)
    # an approver sees every execution of the run
    everyone = follow_pages(client, "/v1/runs/shared/events", auth(BOB))
    seen = {event["execution_id"] for page in everyone for event in page["items"]}
    assert seen == {*alices, carols}


@pytest.mark.parametrize(
    "after",
    [
        "",
        "x",
        "ex_1",
        "ex_1:",
        ":5",
        "ex_1:-1",
        "ex_1:1.5",
        "ex_1: 2",
        "ex_1:2,",
        "ex_1:2,,ex_2:3",
        "ex 1:2",
        "ex\n1:2",
        "ex_é:2",
        f"ex_1:{2**63}",
        ",".join(["ex_2:3"] * 1400),  # longer than a cursor may be
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_bad_cursor_is_400(client: TestClient, after: str, stream: bool) -> None:
    _call(client, "cursor")
    headers = {**auth(), "Accept": "text/event-stream"} if stream else auth()
    answer = client.get("/v1/runs/cursor/events", params={"after": after}, headers=headers)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "invalid_after"
    assert answer.json()["detail"].startswith("after is")


def test_a_page_cursor_resumes_a_stream_where_the_page_ended(client: TestClient) -> None:
    made = [_call(client, "handover") for _ in range(30)]
    whole = [event for execution_id in made for event in _log(client, execution_id)]
    first = client.get("/v1/runs/handover/events", headers=auth()).json()
    streamed = client.get(
        "/v1/runs/handover/events",
        headers={**auth(), "Accept": "text/event-stream", "Last-Event-ID": first["cursor"]},
    )
    assert streamed.status_code == 200, streamed.text
    sent = [json.loads(line[6:]) for line in streamed.text.splitlines() if line[:6] == "data: "]
    assert first["items"] + sent == whole


def test_a_run_stream_gives_back_only_the_pairs_of_the_runs_executions_you_see(
    client: TestClient,
) -> None:
    """A reconnect's cursor may name executions outside the run, or not the caller's: the
    stream's ``id:`` values leave them out, as a page's cursor does, so junk pairs do not
    grow every id past what a reconnect may send (8192 characters: 400)."""
    mine = _call(client, "junk")
    carols = _call(client, "junk", CAROL)
    elsewhere = _call(client, "not-junk")
    junk = [f"ex_{i:032x}:{i}" for i in range(150)]  # well-formed, naming no execution
    sent = ",".join([f"{carols}:0", f"{elsewhere}:0", *junk])
    streamed = client.get(
        "/v1/runs/junk/events",
        headers={**auth(), "Accept": "text/event-stream", "Last-Event-ID": sent},
    )
    assert streamed.status_code == 200, streamed.text
    ids = [line[4:] for line in streamed.text.splitlines() if line[:4] == "id: "]
    assert ids == [f"{mine}:{event['seq']}" for event in _log(client, mine)]
