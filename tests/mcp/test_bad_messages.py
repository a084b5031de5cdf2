"""Bodies that are JSON but no JSON-RPC message, on the 2025-11-25 (session) path: a clear
JSON-RPC error, as the 2026-07-28 path answers, never the validator's dump."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings

HEADERS = {
    "Authorization": "Bearer tg_dev_alice",
    "Host": "127.0.0.1:8080",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-11-25",
}
NOT_MESSAGES = {
    "a batch": [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],
    "a string": "ping",
    "no method": {"jsonrpc": "2.0", "id": 1},
    "another version": {"jsonrpc": "1.0", "id": 1, "method": "ping"},
}


@pytest.mark.parametrize("what", NOT_MESSAGES)
def test_a_body_that_is_no_message_gets_invalid_request(settings: Settings, what: str) -> None:
    """The SDK answered -32602 with pydantic's text: its version, the SDK's class names and
    the input echoed back, in one error message."""
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8080") as client:
        response = client.post("/mcp", content=json.dumps(NOT_MESSAGES[what]), headers=HEADERS)
    assert (response.status_code, response.json()) == (
        400,
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "Invalid Request: the body must be one JSON-RPC request,"
                " notification or response object",
            },
        },
    )


@pytest.mark.parametrize("request_id", [{"a": 1}, [1], True, 1.5], ids=repr)
def test_a_request_whose_id_is_no_id_gets_invalid_request(
    settings: Settings, request_id: object
) -> None:
    """JSON-RPC's id is a string or a number (the SDK's: a string or an integer): in a
    2025-11-25 session the SDK read a request with an object id as a notification and
    answered 202, nothing; the 2026-07-28 path answers -32600."""
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8080") as client:
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bad-id", "version": "1"},
        }
        opened = client.post(
            "/mcp",
            content=json.dumps(
                {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
            ),
            headers=HEADERS,
        )
        assert opened.status_code == 200, opened.text
        session = {**HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        ping = {"jsonrpc": "2.0", "id": request_id, "method": "ping"}
        response = client.post("/mcp", content=json.dumps(ping), headers=session)
    assert (response.status_code, response.json()["error"]["code"]) == (400, -32600)
