"""What careless and hostile clients do to the HTTP doors, beyond their bodies' content."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.types import Message

from gateway.server.app import create_app
from gateway.settings import Settings

CUT_SHORT = {
    "/v1/executions": [(b"authorization", b"Bearer tg_dev_alice")],
    "/v1/plans": [(b"authorization", b"Bearer tg_dev_alice")],
    "/v1/approvals/ap_x/approve": [(b"authorization", b"Bearer tg_dev_bob")],
    "/ui/signin": [(b"content-type", b"application/x-www-form-urlencoded")],
    "/mcp": [
        (b"authorization", b"Bearer tg_dev_alice"),
        (b"host", b"127.0.0.1:8080"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", b"fs.list_dir"),
    ],
    "/mcp#2025-11-25": [  # the SDK's path: it logged the client gone with its traceback
        (b"authorization", b"Bearer tg_dev_alice"),
        (b"host", b"127.0.0.1:8080"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", b"2025-11-25"),
    ],
}
"""Routes that read a body, with the headers that bring a request to its body's read."""


@pytest.mark.parametrize("route", CUT_SHORT)
def test_a_client_gone_before_its_body_ended_is_no_server_error(
    settings: Settings, route: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that sends half a body and hangs up (a timeout of its own, a crash) was an
    "unhandled error": a traceback at ERROR in the log and a 500, for each such request."""
    app = create_app(settings)
    path = route.partition("#")[0]
    headers = [(b"content-type", b"application/json"), (b"content-length", b"400")]
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "http_version": "1.1",
        "server": ("127.0.0.1", 8080),
        "client": ("127.0.0.1", 50000),
        "headers": [*CUT_SHORT[route], *headers],
    }
    pending: list[Message] = [{"type": "http.request", "body": b'{"run_id":', "more_body": True}]
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    with TestClient(app) as client:
        client.portal.call(app, scope, receive, send)
    assert (
        sent[0]["status"],
        [r.getMessage() for r in caplog.records if r.levelname == "ERROR"],
    ) == (400, [])


def test_two_authorization_headers_are_refused_whichever_comes_first(settings: Settings) -> None:
    """The first one was taken and the second ignored: a proxy or log that reads the last
    one would see another caller than the gateway served."""
    twice = [("Authorization", "Bearer tg_dev_bob"), ("Authorization", "Bearer tg_dev_alice")]
    with TestClient(create_app(settings)) as client:
        response = client.get("/v1/executions", headers=twice)
    assert (response.status_code, response.json()["code"]) == (401, "bad_authorization")
