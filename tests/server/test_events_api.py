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
