"""GET /v1/executions/{id}/events?after=SEQ: reading an execution's log incrementally."""

from __future__ import annotations

import json
import re

import pytest
from starlette.testclient import TestClient

from gateway.events.model import make_event
from gateway.service.executions import PAGE_BYTES, PAGE_EVENTS
from tests.helpers import ALICE
from tests.server.helpers import auth, body, follow_pages


def _events(client: TestClient, url: str, after: str | None = None) -> list[dict]:  # type: ignore[type-arg]
    params = {} if after is None else {"after": after}
    response = client.get(url, params=params, headers=auth())
    assert response.status_code == 200, response.text
    items: list[dict] = response.json()["items"]  # type: ignore[type-arg]
    return items


def test_after_returns_only_the_later_events(client: TestClient) -> None:
    done = client.post(
        "/v1/executions",
        json=body("fs.write_file", {"path": "notes/a.txt", "content": "hi"}),
        headers=auth(),
    ).json()
    url = done["links"]["events"]
    every = _events(client, url)
    assert len(every) >= 5
    assert _events(client, url, "2") == [e for e in every if e["seq"] > 2]
    assert _events(client, url, "0") == every[1:]
    last = str(every[-1]["seq"])
    assert _events(client, url, last) == []
    assert _events(client, url, "1000") == []


@pytest.mark.parametrize("after", ["-1", "x", "1.5", "", " 2", "٣"])
def test_a_bad_after_is_400(client: TestClient, after: str) -> None:
    done = client.post(
        "/v1/executions",
        json=body("fs.read_file", {"path": "nope.txt"}),
        headers=auth(),
    ).json()
    response = client.get(done["links"]["events"], params={"after": after}, headers=auth())
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "invalid_after"
    assert "after must be" in response.json()["detail"]


HUGE = [str(2**63), str(2**96), "9" * 5000]
"""Past the largest seq a store holds (2**63 - 1), and past what ``int()`` parses."""
STREAM = {"Accept": "text/event-stream"}


def _ended(client: TestClient) -> dict:  # type: ignore[type-arg]
    done: dict = client.post(  # type: ignore[type-arg]
        "/v1/executions", json=body("fs.read_file", {"path": "nope.txt"}), headers=auth()
    ).json()
    return done


ENTRIES = [
    "after",
    "stream Last-Event-ID",
    "stream after",
    "run stream Last-Event-ID",
    "run after",
    "run stream after",
]


@pytest.mark.parametrize("after", HUGE, ids=["2**63", "2**96", "5000 digits"])
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_huge_cursor_is_400_at_every_entry(client: TestClient, entry: str, after: str) -> None:
    """``?after=``, a live stream's ``Last-Event-ID`` and ``?after=``, a run's (a page's or
    a stream's) ``execution_id:seq``: each is refused whole, before the store or the stream
    sees it."""
    done = _ended(client)
    url = done["links"]["events"]
    path, params, headers, code = {
        "after": (url, {"after": after}, auth(), "invalid_after"),
        "stream Last-Event-ID": (
            url,
            {},
            {**auth(), **STREAM, "Last-Event-ID": after},
            "invalid_last_event_id",
        ),
        "stream after": (url, {"after": after}, {**auth(), **STREAM}, "invalid_after"),
        "run stream Last-Event-ID": (
            "/v1/runs/run-1/events",
            {},
            {**auth(), **STREAM, "Last-Event-ID": f"{done['id']}:{after}"},
            "invalid_last_event_id",
        ),
        "run after": (
            "/v1/runs/run-1/events",
            {"after": f"{done['id']}:{after}"},
            auth(),
            "invalid_after",
        ),
        "run stream after": (
            "/v1/runs/run-1/events",
            {"after": f"{done['id']}:{after}"},
            {**auth(), **STREAM},
            "invalid_after",
        ),
    }[entry]
    response = client.get(path, params=params, headers=headers)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code


def test_the_largest_seq_is_a_cursor(client: TestClient) -> None:
    url = _ended(client)["links"]["events"]
    assert _events(client, url, str(2**63 - 1)) == []
    assert _events(client, url, "0" * 40 + "2") == _events(client, url, "2")


def _with_output(client: TestClient, texts: list[str]) -> str:
    """A completed write whose log then holds a ``tool.output`` event per text, as an
    execution's slow output leaves them (one per flush: thousands, each small); its id."""
    done = client.post(
        "/v1/executions",
        json=body("fs.write_file", {"path": "w.txt", "content": "x"}),
        headers=auth(),
    ).json()
    store = client.app.state.services.latest.store  # type: ignore[attr-defined]
    events = [
        make_event(done["id"], 0, "tool.output", {"stream": "stdout", "text": t}) for t in texts
    ]
    client.portal.call(store.append, done["id"], events)  # type: ignore[union-attr]
    execution_id: str = done["id"]
    return execution_id


def test_a_long_log_comes_a_page_at_a_time_followed_by_next(client: TestClient) -> None:
    execution_id = _with_output(client, [f"line {i}\n" for i in range(2 * PAGE_EVENTS)])
    url = f"/v1/executions/{execution_id}/events"
    pages = follow_pages(client, url)
    got = [event for page in pages for event in page["items"]]
    assert [e["seq"] for e in got] == list(range(len(got)))  # nothing lost or doubled
    assert len(got) > 2 * PAGE_EVENTS
    assert [len(p["items"]) for p in pages] == [PAGE_EVENTS, PAGE_EVENTS, len(got) - 400]
    first, second, last = pages
    assert first == {
        "execution_id": execution_id,
        "items": got[:PAGE_EVENTS],
        "next": first["next"],
    }
    assert first["next"] == f"{url}?after={PAGE_EVENTS - 1}"
    assert second["next"] == f"{url}?after={2 * PAGE_EVENTS - 1}"
    assert last["next"] is None
    later = client.get(url, params={"after": str(got[-1]["seq"])}, headers=auth()).json()
    assert later == {"execution_id": execution_id, "items": [], "next": None}


def test_a_page_of_an_execution_holds_at_most_its_bytes_of_event_data(client: TestClient) -> None:
    big = "y" * (PAGE_BYTES // 3)  # four of them: more than a page's bytes
    execution_id = _with_output(client, [big] * 4)
    pages = follow_pages(client, f"/v1/executions/{execution_id}/events")
    got = [event for page in pages for event in page["items"]]
    assert [e["seq"] for e in got] == list(range(len(got)))
    assert [e["data"].get("text") for e in got].count(big) == 4
    assert len(pages) == 2
    for page in pages:
        size = sum(len(json.dumps(e["data"], separators=(",", ":"))) for e in page["items"])
        assert size <= PAGE_BYTES, size


def test_the_page_shows_a_long_log_a_page_at_a_time_and_streams_the_rest(
    client: TestClient,
) -> None:
    """The execution's page renders the first page of its log, and a log longer than a page
    connects the live timeline after it, which brings the rest (and ``done``), though the
    execution has ended."""
    execution_id = _with_output(client, [f"line {i}\n" for i in range(2 * PAGE_EVENTS)])
    store = client.app.state.services.latest.store  # type: ignore[attr-defined]
    whole = [e.to_json() for e in client.portal.call(store.events, execution_id)]  # type: ignore[union-attr]
    form = client.get("/ui/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    sent = {"csrf": csrf.group(1), "api_key": ALICE}
    signed = client.post("/ui/signin", data=sent, follow_redirects=False)
    assert signed.status_code == 303, signed.text
    shown = client.get(f"/ui/executions/{execution_id}")
    assert shown.status_code == 200, shown.text
    rows = re.findall(r'<span class="seq">#(\d+)</span>', shown.text)
    assert rows == [str(e["seq"]) for e in whole[:PAGE_EVENTS]]
    timeline = f"/ui/executions/{execution_id}/timeline?after={PAGE_EVENTS - 1}"
    assert f'sse-connect="{timeline}"' in shown.text
    streamed = client.get(timeline)
    assert streamed.status_code == 200, streamed.text
    ids = re.findall(r"^id: (\d+)$", streamed.text, re.MULTILINE)
    assert ids == [str(e["seq"]) for e in whole[PAGE_EVENTS:]]
    assert streamed.text.endswith("event: done\ndata: done\n\n")
