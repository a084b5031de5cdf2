"""The plain 2026-07-28 calls answered without the SDK's transport (gateway/mcp/stateless.py)
give the answers the SDK gives: the same requests, good and malformed, sent over loopback
to a gateway that answers them itself and to one whose SDK answers everything
(``mcp.fast_calls: false``), compared byte for byte (ids, times and ports aside); and the
parts that stand in for the SDK's held against the SDK's own."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server import _streamable_http_modern as sdk_modern
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import JSONRPCResponse
from mcp_types import methods as sdk_methods
from starlette.datastructures import Headers
from starlette.types import Message

from gateway import jsontext
from gateway.mcp import calls, results, stateless
from gateway.mcp.endpoint import build_server
from gateway.mcp.writer import Writer, sieved
from gateway.server.app import create_app
from gateway.settings import load_settings
from gateway.testing import gateway, make_project, run_agent_code_without_approval
from tests.helpers import ALICE, starts_processes, until

MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {
    "Authorization": f"Bearer {ALICE}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": MODERN,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "fs.read_file",
}


def _call(
    call_id: str, request_id: Any = 1, name: str = "fs.read_file", **meta: Any
) -> dict[str, Any]:
    params = {
        "name": name,
        "arguments": {"path": "one-kib.txt"},
        "_meta": {**ENVELOPE, "io.toolgate/run_id": "same", "io.toolgate/call_id": call_id, **meta},
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


# -- the two paths over loopback ----------------------------------------------------------


@pytest.fixture(scope="module")
@starts_processes
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A gateway that answers plain calls itself, and one whose SDK answers everything."""
    with _gateway(tmp_path_factory, True) as fast, _gateway(tmp_path_factory, False) as sdk:
        yield fast, sdk


def _gateway(factory: pytest.TempPathFactory, fast: bool) -> Any:
    root = factory.mktemp("fast" if fast else "sdk")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    data = yaml.safe_load(config.read_text())
    data["mcp"] = {**data.get("mcp", {}), "fast_calls": fast}
    config.write_text(yaml.safe_dump(data))
    workspace = root / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "one-kib.txt").write_text("x" * 1024)
    return gateway(config)


_VARYING = [
    (re.compile(r"http://127\.0\.0\.1:\d+"), "http://gateway"),
    (re.compile(r"\b(ex|ap|ev)_[0-9a-f]{32}\b"), r"\1_ID"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "TIME"),
    (re.compile(r'"(\w*_ms|duration_s|elapsed_ms)":\s*[\d.]+'), r'"\1":0'),
    (re.compile(r"\bmcp-[0-9a-f]{32}\b"), "mcp-RUN"),
]


def _answer(url: str, body: bytes, headers: dict[str, str], method: str = "POST") -> Any:
    response = httpx.request(method, url + "/mcp", content=body, headers=headers, timeout=60)
    assert int(response.headers.get("content-length", len(response.content))) == len(
        response.content
    )
    text = response.text
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    kept = {k: v for k, v in response.headers.items() if k not in ("date", "content-length")}
    return response.status_code, kept, text


def _both(pair: tuple[str, str], body: bytes, headers: dict[str, str], method: str = "POST") -> Any:
    fast, sdk = (_answer(url, body, headers, method) for url in pair)
    assert fast == sdk
    return fast


def test_a_plain_call_is_answered_alike(pair: tuple[str, str]) -> None:
    status, headers, text = _both(pair, json.dumps(_call("plain")).encode(), HEADERS)
    assert status == 200 and headers["content-type"] == "application/json"
    message = json.loads(text)
    assert message["result"]["_meta"]["io.toolgate/outcome"] == "succeeded", message
    assert "io.toolgate/error" not in message["result"]["_meta"]  # the SDK's sieve drops None
    assert message["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "toolgate"


def test_a_call_with_client_info_and_capabilities_is_answered_alike(
    pair: tuple[str, str],
) -> None:
    body = _call(
        "with-info",
        request_id="s-1",
        **{
            "io.modelcontextprotocol/clientInfo": {"name": "agent \u00e9", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
        },
    )
    del body["params"]["_meta"]["io.toolgate/call_id"]  # derived from the id and the client
    status, _, text = _both(pair, json.dumps(body).encode(), HEADERS)
    assert status == 200 and '"succeeded"' in text


def _params(call_id: str, **changed: Any) -> dict[str, Any]:
    message = _call(call_id)
    return {**message, "params": {**message["params"], **changed}}


def _tasks() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {calls.TASKS_EXTENSION: {}}}
    }


CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
VERSION = "io.modelcontextprotocol/protocolVersion"
NOTIFICATION = {k: v for k, v in _call("x").items() if k != "id"}
VARIANTS: list[tuple[str, Any, dict[str, str], bool]] = [
    # what, the message, headers changed, whether the fast path answers it
    ("unknown tool", _call("u", name="no.such_tool"), {"Mcp-Name": "no.such_tool"}, True),
    ("bad arguments", _params("b", arguments={}), {}, True),
    ("null arguments", _params("b0", arguments=None), {}, True),
    ("a huge id", _call("h", request_id=2**70), {}, True),
    ("a string id", _call("si", request_id="\u00e9"), {}, True),
    ("a character beyond the BMP", _call("\U0001f600"), {}, True),
    ("no workspace", _call("ws", **{"io.toolgate/workspace": "nowhere"}), {}, True),
    ("a bad traceparent", _call("tp", traceparent="nope"), {}, True),
    ("a lone surrogate in an argument", _params("ls", arguments={"path": "\ud800"}), {}, True),
    ("a lone surrogate in the call id", _call("c\udc00"), {}, True),
    ("a workspace not a string", _call("wl", **{"io.toolgate/workspace": ["demo"]}), {}, True),
    ("arguments not an object", _params("n", arguments=5), {}, False),
    ("a name not a string", _params("nn", name=5), {}, False),
    ("a float id", _call("f", request_id=1.0), {}, False),
    ("a true id", _call("t", request_id=True), {}, False),
    ("a null id", _call("z", request_id=None), {}, False),
    ("no id: a notification", NOTIFICATION, {}, False),
    ("jsonrpc 1.0", {**_call("j"), "jsonrpc": "1.0"}, {}, False),
    ("a batch", [_call("batch")], {}, False),
    ("not an object", "tools/call", {}, False),
    ("no _meta", {**_call("m"), "params": {"name": "fs.read_file"}}, {}, False),
    ("no capabilities", _call("c", **{CAPS: None}), {}, False),
    ("capabilities of the wrong type", _call("w", **{CAPS: 3}), {}, False),
    ("client info of the wrong type", _call("i", **{INFO: 7}), {}, False),
    ("another version in _meta", _call("v", **{VERSION: "2099-01-01"}), {}, False),
    (
        "an unsupported version",
        _call("v2", **{VERSION: "2099-01-01"}),
        {"MCP-Protocol-Version": "2099-01-01"},
        False,
    ),
    ("Mcp-Name differs", _call("nm"), {"Mcp-Name": "fs.write_file"}, False),
    ("Mcp-Method differs", _call("mm"), {"Mcp-Method": "tools/list"}, False),
    ("a lone surrogate in a _meta key", _call("s", **{"x\udc00": 1}), {}, False),
    ("a dry run", _call("d", **{"io.toolgate/dry_run": True}), {}, False),
    ("a bad dry run", _call("d2", **{"io.toolgate/dry_run": "yes"}), {}, False),
    ("a progress token", _call("p", progressToken="tok"), {}, False),
    ("the tasks extension", _call("x", **_tasks()), {}, False),
    ("params beyond plain", _params("e", requestState="s"), {}, False),
    (
        "the status tool",
        _call("st", name=results.STATUS_TOOL),
        {"Mcp-Name": results.STATUS_TOOL},
        False,
    ),
]


@pytest.mark.parametrize(
    ("what", "message", "headers", "plain"), VARIANTS, ids=[v[0] for v in VARIANTS]
)
def test_every_variant_is_answered_alike(
    pair: tuple[str, str], what: str, message: Any, headers: dict[str, str], plain: bool
) -> None:
    body = json.dumps(message).encode()
    _both(pair, body, {**HEADERS, **headers})


@pytest.mark.parametrize(
    ("what", "body", "headers", "method"),
    [
        ("not JSON", b"{nope", {}, "POST"),
        ("deeply nested", b"[" * 100_000, {}, "POST"),
        ("only JSON accepted", b"{}", {"Accept": "application/json"}, "POST"),
        ("text/plain", json.dumps(_call("tp")).encode(), {"Content-Type": "text/plain"}, "POST"),
        ("another host", json.dumps(_call("ho")).encode(), {"Host": "evil.example:80"}, "POST"),
        (
            "another origin",
            json.dumps(_call("or")).encode(),
            {"Origin": "http://evil.example"},
            "POST",
        ),
        ("GET", b"", {}, "GET"),
        ("DELETE", b"", {}, "DELETE"),
        ("no credential", json.dumps(_call("nc")).encode(), {"Authorization": ""}, "POST"),
    ],
)
def test_every_refusal_is_answered_alike(
    pair: tuple[str, str], what: str, body: bytes, headers: dict[str, str], method: str
) -> None:
    sent = {k: v for k, v in {**HEADERS, **headers}.items() if v}
    _both(pair, body, sent, method)


def test_a_duplicated_routing_header_is_answered_alike(pair: tuple[str, str]) -> None:
    body = json.dumps(_call("dup")).encode()
    sent = [*HEADERS.items(), ("Mcp-Method", "tools/call")]
    answers = [httpx.post(url + "/mcp", content=body, headers=sent, timeout=30) for url in pair]
    assert [(a.status_code, a.text) for a in answers] == [
        (answers[0].status_code, answers[0].text)
    ] * 2
    assert answers[0].status_code == 400 and "appears more than once" in answers[0].text


# -- the parts that stand in for the SDK's ------------------------------------------------


def test_the_event_stream_is_the_sdks() -> None:
    assert stateless.SSE_WINDOW_S == sdk_modern._SSE_PING_INTERVAL
    assert stateless.SSE_HEADERS == sdk_modern._SSE_HEADERS


def test_the_gateways_server_is_one_the_fast_path_may_answer_for() -> None:
    server = build_server()
    assert stateless.serves_plain_calls(server)
    server.middleware.append(server.middleware[-1])
    assert not stateless.serves_plain_calls(server)


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in headers.items()]


def _classify(message: Any, **headers: str) -> stateless.PlainCall | None:
    server = build_server()
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    sent = stateless.Heads.of(_raw({**HEADERS, **headers}), stateless.READ)
    found = stateless.StatelessCalls(server, security, 1 << 20)._plain(
        json.dumps(message).encode(), sent
    )
    return found[0] if found else None


def test_a_duplicated_routing_header_is_no_plain_call() -> None:
    heads = stateless.Heads.of([*_raw(HEADERS), (b"mcp-method", b"tools/call")], stateless.READ)
    server = build_server()
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    body = json.dumps(_call("dup")).encode()
    assert stateless.duplicated(heads)
    assert stateless.StatelessCalls(server, security, 1 << 20)._plain(body, heads) is None


def test_the_plain_calls_are_told_apart() -> None:
    plain = _classify(_call("a", request_id=7))
    assert plain is not None and plain.request_id == 7 and plain.client_name == "mcp"
    named = _classify(_call("b", **{INFO: {"name": "claude", "version": "1"}}))
    assert named is not None and named.client_name == "claude"
    for what, message, headers, expected in VARIANTS:
        assert (_classify(message, **headers) is not None) is expected, what


def _sdk_encoded(request_id: Any, out: dict[str, Any]) -> str:
    """What the SDK writes for a handler's result (``ServerRunner._serialize``, then
    ``_to_jsonrpc_response`` and ``_write``)."""
    dumped = sdk_methods.serialize_server_result("tools/call", MODERN, dict(out))
    stamp = build_server().server_info_stamp
    dumped["_meta"] = {**dumped.get("_meta", {}), "io.modelcontextprotocol/serverInfo": stamp}
    message = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=dumped)
    body = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(body, separators=(",", ":"))


_texts = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["\ud800", "a\udc00", "\U0001f600", "\\ud800", "NaN"]
)
"""Any text, lone surrogates and characters beyond the BMP among it (the SDK refuses some)."""
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=12,
)
_results = st.fixed_dictionaries(
    {
        "content": st.lists(st.builds(lambda t: {"type": "text", "text": t}, _texts), max_size=2),
        "isError": st.booleans(),
        "resultType": st.just("complete"),
        "_meta": st.dictionaries(st.sampled_from(["io.toolgate/a", "io.toolgate/b", "c"]), _json),
    },
    optional={"structuredContent": _json},
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(out=_results, request_id=st.integers(-(2**40), 2**40) | st.text(max_size=8))
def test_a_result_is_written_as_the_sdk_writes_it(out: dict[str, Any], request_id: Any) -> None:
    try:
        expected: str | type[Exception] = _sdk_encoded(request_id, out)
    except Exception as exc:  # the SDK's sieve refuses it: so must the fast path
        expected = type(exc)
    writer = Writer(build_server().server_info_stamp)
    try:
        got: str | type[Exception] = writer.encoded(request_id, dict(out), MODERN)
    except Exception as exc:
        got = type(exc)
    if isinstance(expected, type):
        assert isinstance(got, type), got  # an error in both (the SDK's, or ours for it)
    else:
        assert got == expected


def test_results_of_the_shapes_the_gateway_builds_are_sieved_without_the_sdk() -> None:
    out = results.refused(calls.ToolgateError("no", code="invalid_arguments"))
    out["resultType"] = "complete"
    assert sieved(out) == sdk_methods.serialize_server_result("tools/call", MODERN, out)
    assert sieved({**out, "resultType": "task"}) is None
    assert sieved({**out, "content": [{"type": "image", "data": ""}]}) is None


def test_text_standing_for_structured_content_is_written_as_the_sdk_writes_it() -> None:
    """The JSON of ``structuredContent`` is written once when a text block is it (ASCII,
    no DEL: ``jsontext.response`` writes those unescaped), else encoded again."""
    writer = Writer(build_server().server_info_stamp)
    for structured in (
        {"content": "x" * 1024, "size": 1024},
        {"a": "caf\u00e9", "b": "\U0001f600"},
        {"del": "a\x7fb", "ctl": "\x00\n\t", "q": '"\\'},
        {"q": 'say "hi" \\ \\\\ "" \\u00e9', "ctl": "\n", "path": "a\\b\\"},
        {"lone": "\ud800"},
        {"escaped": "\\ud800", "n": [1, 2.5, None, True]},
        {},
    ):
        text = jsontext.response(structured)
        for request_id in (7, "r-\u00e9", 2**70):
            out = {
                "content": [{"type": "text", "text": "ok: \u00e9"}, {"type": "text", "text": text}],
                "isError": False,
                "resultType": "complete",
                "_meta": {"io.toolgate/outcome": "succeeded", "io.toolgate/error": None},
                "structuredContent": structured,
            }
            try:
                expected: str | type[Exception] = _sdk_encoded(request_id, out)
            except Exception as exc:
                expected = type(exc)
            try:
                got: str | type[Exception] = writer.encoded(request_id, dict(out), MODERN, text)
            except Exception as exc:
                got = type(exc)
            if isinstance(expected, type):
                assert isinstance(got, type), (structured, got)
            else:
                assert got == expected, structured


def test_the_headers_are_read_in_one_pass_as_starlette_and_the_sdk_read_them() -> None:
    raw = _raw(HEADERS)
    heads = stateless.Heads.of(
        [*raw, (b"accept", b"text/plain"), (b"x-other", b"1")], stateless.READ
    )
    assert heads.first["accept"] == HEADERS["Accept"]  # the first, as Headers.get finds it
    assert heads.certain and not stateless.duplicated(heads)
    assert stateless.duplicated(stateless.Heads.of([*raw, (b"mcp-name", b"x")], stateless.READ))
    # What the SDK reads otherwise than this module would: the SDK serves such a request.
    assert not stateless.Heads.of([*raw, (b"Mcp-Method", b"tools/call")], stateless.READ).certain
    assert not stateless.Heads.of([*raw, (b"content-length", b"1_0")], stateless.READ).certain


_header_names = st.sampled_from(
    b"host Host mcp-method mcp-name MCP-Name accept x-other X-Other traceparent content-length "
    b"mcp-protocol-version mcp-session-id".split()
)


@settings(max_examples=300, deadline=None)
@given(raw=st.lists(st.tuples(_header_names, st.sampled_from([b"a", b"10", b""])), max_size=7))
def test_the_headers_are_read_alike_however_they_come(raw: list[tuple[bytes, bytes]]) -> None:
    """``Heads.of`` reads each header's first value as Starlette's ``Headers.get`` finds it
    (the endpoint and ``context.Door`` read them there), a routing header twice, and a
    name of those it reads in upper case (the SDK would read it: it then decides)."""
    heads = stateless.Heads.of(raw, stateless.READ)
    read = Headers(raw=[(k, v) for k, v in raw if k.islower()])
    names = {k.decode() for k, _ in raw if k.islower()} & set(stateless.READ.first.values())
    assert heads.first == {name: read[name] for name in names}
    routing = [k for k, _ in raw if k.decode() in stateless._ROUTING]
    assert stateless.duplicated(heads) == (len(routing) != len(set(routing)))
    upper = any(not k.islower() and k.lower() in stateless.READ.first for k, _ in raw)
    length = heads.first.get("content-length")
    assert heads.certain == (not upper and length in (None, "10"))


# -- in process: a client that goes away, a call past the SDK's window ---------------------


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two projects that run agent code without approval: one answers plain calls itself,
    the other's SDK answers everything."""
    configs = []
    for fast in (True, False):
        root = tmp_path_factory.mktemp("inproc-fast" if fast else "inproc-sdk")
        config = make_project(root, f"sqlite:///{root}/toolgate.db")
        run_agent_code_without_approval(root, ("proc.python",))
        data = yaml.safe_load(config.read_text())
        data["mcp"] = {**data.get("mcp", {}), "fast_calls": fast}
        config.write_text(yaml.safe_dump(data))
        workspace = root / "var" / "workspaces" / "demo"
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "slow.py").write_text("import sys, time\ntime.sleep(float(sys.argv[1]))\n")
        configs.append(config)
    return configs[0], configs[1]


def _script_call(call_id: str, seconds: float) -> bytes:
    message = _call(call_id, name="proc.python")
    message["params"]["arguments"] = {"script": "slow.py", "args": [str(seconds)]}
    return json.dumps(message).encode()


async def _exchange(app: Any, body: bytes, gone: anyio.Event | None = None) -> list[Message]:
    """What ``app`` sends for one ``POST /mcp``; ``gone``: the client goes away when set."""
    headers = {**HEADERS, "Mcp-Name": "proc.python", "Content-Length": str(len(body))}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), *_raw(headers)],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    ended = anyio.Event()
    sent: list[Message] = []

    async def receive() -> Message:
        if pending:
            return pending.pop()
        async with anyio.create_task_group() as group:
            for event in (ended, gone):
                if event is not None:
                    group.start_soon(_cancel_when_set, event, group.cancel_scope)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            ended.set()

    await app(scope, receive, send)
    return sent


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _in_process(config: Path, work: Any) -> Any:
    app = create_app(load_settings(config))
    async with app.router.lifespan_context(app):
        return await work(app)


def _seen(sent: list[Message]) -> list[Any]:
    """What a client sees of ``sent``: the status and headers, the body (consecutive pings
    as one: how many fit in the wait is a matter of timing), ids and times aside."""
    seen: list[Any] = []
    for message in sent:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message["headers"] if k != b"content-length"]
            seen.append((message["status"], headers))
            continue
        text = message.get("body", b"").decode()
        for pattern, replacement in _VARYING:
            text = pattern.sub(replacement, text)
        text = re.sub(r"\b\d+\.\d+s\b", "1.0s", text)  # how long the script ran, its pid
        text = re.sub(r'(\\?"(\w*_ms|pid)\\?":)\d+', r"\g<1>0", text)
        if not (text == stateless.PING.decode() and seen and seen[-1] == text):
            seen.append(text)
    return seen


def test_a_call_past_the_window_streams_as_the_sdks_does(
    apps: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stateless, "SSE_WINDOW_S", 0.3)
    monkeypatch.setattr(sdk_modern, "_SSE_PING_INTERVAL", 0.3)
    body = _script_call("slow-stream", 1.2)

    async def call(app: Any) -> list[Message]:
        return await _exchange(app, body)

    fast, sdk = (_seen(anyio.run(_in_process, config, call)) for config in apps)
    assert fast == sdk
    assert fast[0] == (200, stateless.SSE_HEADERS) and fast[1] == stateless.PING.decode()
    assert fast[-1].startswith("event: message\r\ndata: ") and '"succeeded"' in fast[-1], fast


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "sdk"])
def test_a_client_that_goes_away_cancels_the_execution(apps: tuple[Path, Path], fast: bool) -> None:
    body = _script_call(f"gone-{fast}", 60)

    async def call(app: Any) -> tuple[list[Message], Any, list[Any]]:
        store = app.state.services.latest.store
        gone = anyio.Event()
        async with anyio.create_task_group() as group:
            answers: list[list[Message]] = []

            async def client() -> None:
                answers.append(await _exchange(app, body, gone))

            group.start_soon(client)

            async def spawned() -> str | None:
                # the script's process exists (the adapter checkpointed its pid): its side
                # effect has begun; "running" alone may be a call not yet started
                found = await store.find_executions("alice", "same", f"gone-{fast}")
                events = await store.events(found[0].id) if found else []
                began = any(e.type == "state.checkpointed" and "adapter" in e.data for e in events)
                return found[0].id if began else None

            execution_id = await until(spawned, "the script to start", limit=30)
            gone.set()

        async def ended() -> Any:
            record = await store.get_execution(execution_id)
            return record if record is not None and record.terminal else None

        record = await until(ended, "the call to end", limit=30)
        return answers[0], record, await store.events(record.id)

    started = time.monotonic()
    sent, record, events = anyio.run(_in_process, apps[0 if fast else 1], call)
    assert sent == []  # nobody to answer
    # begun, then stopped; proc.python has no reconcile probe (docs/failures.md, cancel)
    assert (record.outcome, record.result["error"]["type"]) == ("unknown", "cancelled"), record
    cancels = [e for e in events if e.data.get("status") == "cancelling"]
    assert cancels and cancels[0].data["by"] == "alice"
    assert time.monotonic() - started < 50  # not the script's 60 s


def test_the_fast_path_counts_the_plain_calls_it_serves_and_no_other(
    apps: tuple[Path, Path],
) -> None:
    plain = _script_call("counted-plain", 0)
    progress = json.loads(_script_call("counted-progress", 0))
    progress["params"]["_meta"]["progressToken"] = "p1"  # the SDK's path serves progress

    async def calls_(app: Any) -> list[tuple[int, str]]:
        fast = app.state.mcp.endpoint
        seen = []
        for body in (plain, json.dumps(progress).encode()):
            before = fast.stateless.served if fast is not None else 0
            sent = await _exchange(app, body)
            fast = app.state.mcp.endpoint
            seen.append((fast.stateless.served - before, _seen(sent)[-1]))
        return seen

    (plain_seen, plain_text), (sdk_seen, sdk_text) = anyio.run(_in_process, apps[0], calls_)
    assert '"succeeded"' in plain_text and '"succeeded"' in sdk_text, (plain_text, sdk_text)
    assert (plain_seen, sdk_seen) == (1, 0)
