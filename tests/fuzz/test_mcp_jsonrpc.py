"""A JSON-RPC fuzzer against ``/mcp`` on a real gateway, with alice's demo key: malformed
envelopes (not JSON, not an object, batches, wrong ``jsonrpc``), ids of every type and size
(huge integers, floats, nested values), known and unknown methods with params of wrong types,
and ``tools/call`` of the shipped tools with arbitrary arguments; on both eras' headers.

No answer may be 5xx. An HTTP-level refusal is ``application/problem+json``; everything else
is a JSON-RPC message (plain JSON or one SSE event): ``jsonrpc: "2.0"`` and either a
``result`` or an ``error`` with an integer ``code`` and a string ``message``, never an
internal error (``-32603``, or the code 0 the SDK gives an exception that escaped a
handler), never an exception's text (in an error or an ``isError`` result).

Bounded and reproducible like tests/fuzz/test_openapi.py: fixed ``max_examples``,
derandomized, no deadline, no example database; the volume is in ``VOLUME``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz.strategies import (
    ARGUMENT_KEYS,
    TOOLS,
    argument_values,
    ids,
    json_scalars,
    json_values,
)
from tests.helpers import ALICE, FUZZ_SCALE

EXAMPLES = 120 * FUZZ_SCALE
MODERN = "2026-07-28"
WORKSPACE = "io.toolgate/workspace"


METHODS = (
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "resources/list",
    "prompts/list",
    "notifications/initialized",
    "notifications/cancelled",
    "completion/complete",
    "logging/setLevel",
)
INTERNAL_ERROR = -32603
RAW_EXCEPTION = re.compile(
    r"Traceback|unhashable type|object has no attribute|is not subscriptable|"
    r"object is not|takes \d+ positional|unexpected keyword|codec can't|"
    r"(Type|Key|Value|Attribute|Index|Unicode\w*|Runtime|Assertion)Error\b"
)
"""What an exception's text looks like (what must never reach a client)."""
VOLUME: dict[str, int] = {"requests": 0, "problem": 0, "jsonrpc_error": 0, "jsonrpc_result": 0}


def _meta(era: str) -> dict[str, Any]:
    if era != MODERN:
        return {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }


@st.composite
def tool_calls(draw: st.DrawFn, era: str) -> dict[str, Any]:
    name = draw(st.sampled_from(TOOLS) | st.text(max_size=20))
    keys = ARGUMENT_KEYS.get(name) or ("x",)
    values = argument_values
    arguments = draw(
        st.dictionaries(st.sampled_from(keys) | st.text(max_size=8), values, max_size=4)
        | st.fixed_dictionaries({key: values for key in keys})
        | json_values
    )
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if draw(st.integers(0, 5)):
        params["_meta"] = _meta(era)
    return {"jsonrpc": "2.0", "id": draw(ids), "method": "tools/call", "params": params}


@st.composite
def envelopes(draw: st.DrawFn, era: str) -> dict[str, Any] | list[Any] | Any:
    kind = draw(st.sampled_from(["object", "object", "object", "call", "call", "batch", "value"]))
    if kind == "call":
        return draw(tool_calls(era))
    if kind == "value":
        return draw(json_values)
    message: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        message["jsonrpc"] = draw(st.just("2.0") | json_scalars)
    if draw(st.integers(0, 4)):
        message["id"] = draw(ids)
    if draw(st.integers(0, 9)):
        message["method"] = draw(st.sampled_from(METHODS) | json_scalars)
    if draw(st.booleans()):
        params = draw(json_values)
        if isinstance(params, dict) and draw(st.booleans()):
            params["_meta"] = _meta(era)
        message["params"] = params
    if kind == "batch":
        return [message, draw(tool_calls(era))]
    return message


@pytest.fixture(scope="module")
def http(served: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served, timeout=30) as client:
        yield client


BASE_HEADERS = {
    "Authorization": f"Bearer {ALICE}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


@pytest.fixture(scope="module")
def session(http: httpx.Client) -> str:
    """A 2025-11-25 session (the legacy era refuses requests outside one)."""
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"},
        },
    }
    opened = http.post("/mcp", json=hello, headers=BASE_HEADERS)
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers = {**BASE_HEADERS, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    assert http.post("/mcp", json=note, headers=headers).status_code == 202
    return sid


def _printable(value: object) -> bool:
    return isinstance(value, str) and value.isascii() and value.isprintable()


def _headers(era: str, envelope: object, sid: str) -> dict[str, str]:
    headers = dict(BASE_HEADERS)
    if era != MODERN:
        headers["MCP-Protocol-Version"] = era
        headers["Mcp-Session-Id"] = sid
        return headers
    headers["MCP-Protocol-Version"] = MODERN
    if isinstance(envelope, dict):
        method = envelope.get("method")
        if _printable(method):
            headers["Mcp-Method"] = str(method)
        params = envelope.get("params")
        if method == "tools/call" and isinstance(params, dict) and _printable(params.get("name")):
            headers["Mcp-Name"] = str(params["name"])
    return headers


def _messages(response: httpx.Response) -> list[Any]:
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "text/event-stream":
        # Only CR, LF and CRLF end an SSE line (str.splitlines would also split at U+2028 and
        # friends, which JSON text may hold); an event's data lines join with LF.
        messages, data = [], []
        for line in [*re.split(r"\r\n|\r|\n", response.text), ""]:
            if line.startswith("data:"):
                data.append(line[len("data:") :].removeprefix(" "))
            elif not line and data:
                messages.append(json.loads("\n".join(data)))
                data = []
        return messages
    assert kind == "application/json", f"{response.status_code} as {kind!r}: {response.text[:300]}"
    body = json.loads(response.content)
    return body if isinstance(body, list) else [body]


def check(response: httpx.Response, sent: object) -> None:
    where = f"{response.status_code} for {json.dumps(sent)[:300]}"
    assert response.status_code < 500, f"{where}: {response.text[:500]}"
    assert "internal_error" not in response.text, f"{where}: {response.text[:500]}"
    VOLUME["requests"] += 1
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "application/problem+json":
        assert response.status_code >= 400, where
        problem = response.json()
        assert problem["status"] == response.status_code and isinstance(problem["title"], str)
        VOLUME["problem"] += 1
        return
    if response.status_code == 202 and not response.content:
        return  # a notification (or a batch of them) accepted
    for message in _messages(response):
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", where
        if "error" in message:
            error = message["error"]
            assert isinstance(error.get("code"), int), where
            assert isinstance(error.get("message"), str), where
            # The gateway answers every fault it can foresee with a clear error: an internal
            # error, the SDK's code 0 (an exception that escaped a handler) or an exception's
            # text is a bug the fuzzer found.
            assert error["code"] not in (INTERNAL_ERROR, 0), f"{where}: {error}"
            assert RAW_EXCEPTION.search(error["message"]) is None, f"{where}: {error}"
            VOLUME["jsonrpc_error"] += 1
        else:
            assert "result" in message, f"{where}: {message}"
            result = message["result"]
            if isinstance(result, dict) and result.get("isError"):
                text = json.dumps(result.get("content"))
                assert RAW_EXCEPTION.search(text) is None, f"{where}: {result}"
                found = (result.get("_meta") or {}).get("io.toolgate/error") or {}
                assert found.get("type") != "internal", f"{where}: {result}"
            VOLUME["jsonrpc_result"] += 1


@pytest.mark.parametrize("era", [MODERN, "2025-11-25"])
def test_jsonrpc_envelopes_never_5xx(http: httpx.Client, session: str, era: str) -> None:
    VOLUME.update(dict.fromkeys(VOLUME, 0))

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(envelope=envelopes(era))
    def run(envelope: Any) -> None:
        body = json.dumps(envelope).encode()
        check(http.post("/mcp", content=body, headers=_headers(era, envelope, session)), envelope)

    run()
    print(f"mcp fuzz ({era}): {VOLUME}")
    assert VOLUME["requests"] >= EXAMPLES


RAW_BODIES = (
    b"",
    b"{",
    b"null",
    b"[]",
    b"[[]]",
    b"\xff\xfe\x00",
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"',
    b'{"jsonrpc": "2.0", "id": 1e999, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "method": "tools/list"}',
    b"[" + b"[" * 5000 + b"]" * 5000 + b"]",
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'"\\ud800"',
)


@pytest.mark.parametrize("era", [MODERN, "2025-11-25"])
@pytest.mark.parametrize("body", RAW_BODIES, ids=range(len(RAW_BODIES)))
def test_raw_bodies_never_5xx(http: httpx.Client, session: str, era: str, body: bytes) -> None:
    headers = _headers(era, {"method": "ping"}, session)
    check(http.post("/mcp", content=body, headers=headers), body.decode("latin-1"))


def _known(era: str) -> list[dict[str, Any]]:
    """Requests that once reached the client as an exception's text or an internal error
    (issue 14's audit): a workspace that is not a string, a lone UTF-16 surrogate."""
    envelope = _meta(era)
    call = {"name": "fs.read_file", "arguments": {"path": "\ud800"}, "_meta": envelope}
    return [
        {"method": "tools/list", "params": {"_meta": {**envelope, WORKSPACE: ["demo"]}}},
        {"method": "tools/list", "params": {"_meta": {**envelope, WORKSPACE: {"id": 1}}}},
        {"method": "tools/call", "params": call},
        {
            "method": "tools/call",
            "params": {**call, "_meta": {**envelope, "io.toolgate/run_id": "\udc00"}},
        },
        {
            "method": "tools/call",
            "params": {**call, "_meta": {**envelope, WORKSPACE: ["demo"]}},
        },
        {
            "method": "tools/call",
            "params": {
                "name": "toolgate.execution_status",
                "arguments": {"execution_id": "\ud800"},
                "_meta": envelope,
            },
        },
        {"method": "tasks/get", "params": {"taskId": "\ud800", "_meta": envelope}},
    ]


@pytest.mark.parametrize("era", [MODERN, "2025-11-25"])
def test_known_faults_are_answered_cleanly(http: httpx.Client, session: str, era: str) -> None:
    for number, known in enumerate(_known(era)):
        envelope = {"jsonrpc": "2.0", "id": number + 1, **known}
        body = json.dumps(envelope).encode()
        check(http.post("/mcp", content=body, headers=_headers(era, envelope, session)), envelope)
