"""Request helpers for the HTTP API tests: the Authorization header and a valid body."""

from __future__ import annotations

import itertools
from typing import Any

from starlette.testclient import TestClient

from tests.helpers import ALICE

_calls = itertools.count()


def auth(key: str = ALICE) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def body(tool: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A valid execution request for alice in workspace demo."""
    out: dict[str, Any] = {
        "run_id": "run-1",
        "turn_id": "t1",
        "call_id": f"c{next(_calls)}",
        "tool": {"name": tool},
        "arguments": arguments,
        "actor": {"user_id": "alice", "agent_id": "coder"},
        "workspace": {"id": "demo"},
    }
    out.update(extra)
    return out


def follow_pages(
    client: TestClient, url: str, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every page of events (a run's or an execution's) from ``url``, following ``next``
    until it is null."""
    pages: list[dict[str, Any]] = []
    link: str | None = url
    while link is not None:
        answer = client.get(link, headers=headers or auth())
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        link = pages[-1]["next"]
        assert len(pages) < 50, "next never ends"
    return pages
