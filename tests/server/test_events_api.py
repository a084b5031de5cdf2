"""GET /v1/executions/{id}/events?after=SEQ: reading an execution's log incrementally."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.server.helpers import auth, body


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
