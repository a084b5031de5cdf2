"""The 2026-07-28 era's plain ``tools/call``, answered without the SDK's transport.

A stateless ``tools/call`` of a catalogue tool is most of what agents send to ``/mcp``. The
SDK's entry for that era runs each one through a task group of two tasks, a memory stream, a
span, its kernel's connection, session and context objects and a pydantic envelope, which
cost about as much CPU again as the call itself (docs/performance.md). This module answers
exactly such a request itself, with the same bytes, and leaves everything else to the SDK:

- every check the SDK's entry makes first runs here first, with the SDK's own functions: the
  Content-Type, Host and Origin of DNS-rebinding protection, the method, Accept, the
  JSON-RPC envelope, the routing headers and the protocol-version ladder, the SDK's
  validation of the params for the request's version (``validate_client_request``, then
  ``CallToolRequestParams``);
- a request any of them would refuse, or one that is not a plain call (another method, a
  notification, a batch, the status tool, a dry run, a progress token, the tasks extension,
  params beyond ``name``, ``arguments`` and ``_meta``, an id that is not a string or an
  integer), is handed to the SDK's transport with the body read here, and it answers as it
  would have: nothing of the request is lost or answered twice;
- the call runs through ``calls.plain_call``, the code the SDK path runs; its result is
  shaped as the SDK's kernel shapes it (its result sieve for the version, its ``serverInfo``
  stamp, the JSON-RPC envelope), written as JSON, or, when the call runs past the SDK's
  window (``SSE_WINDOW_S``), as one SSE event after keep-alive pings, as the SDK does;
- a client that goes away before the answer cancels the execution
  (``calls._cancel_abandoned``), as when the SDK cancels its handler.

It holds only for the server ``endpoint.build_server`` makes (``serves_plain_calls`` checks
what could change the answer). tests/mcp/test_stateless.py sends the same requests, good and
malformed, down both paths and compares the answers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.runner import modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    INTERNAL_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    CallToolRequestParams,
    ClientCapabilities,
    Implementation,
    JSONRPCError,
)
from mcp_types import methods as _methods
from pydantic import ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway import jsontext
from gateway.mcp import calls, meta, results

SSE_WINDOW_S = 15.0
"""How long the SDK answers a silent call with plain JSON before it commits to an event
stream and pings it (``_SSE_PING_INTERVAL`` of its modern entry; a test holds them equal)."""
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
"""The SDK's event-stream response headers (``_SSE_HEADERS``; a test holds them equal)."""
PING = b": ping\r\n\r\n"
PARAM_KEYS = frozenset({"name", "arguments", "_meta"})
NOT_PLAIN_META = frozenset({"progressToken", meta.DRY_RUN})
"""``_meta`` keys that make a call more than plain (the SDK path serves them)."""
RESERVED = "io.modelcontextprotocol/"
ENVELOPE = frozenset({PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY})
_SURROGATE_IN_BODY = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""A UTF-16 surrogate in JSON text: escaped, or encoded in the bytes (``json.loads`` lets
both through); a pair (a character beyond the BMP, escaped) matches too."""
_SURROGATE_IN_TEXT = re.compile(r"\\ud[89a-f]")
"""The same in what ``json`` writes with ``ensure_ascii`` (lower-case escapes)."""
RESULT_KEYS = frozenset({"_meta", "content", "isError", "resultType", "structuredContent"})


class StatelessCalls:
    """Answers the plain calls of the 2026-07-28 era for ``server`` (see the module)."""

    def __init__(self, server: Server[Any], security: TransportSecuritySettings) -> None:
        self.server = server
        self.security = TransportSecurityMiddleware(security)
        self.stamp = server.server_info_stamp
        """The SDK's ``serverInfo`` stamp: the SDK copies it for every answer, in case an
        answer is changed afterwards; this one is only encoded."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """Answer the request if it is a plain call (None), else return what the SDK's
        transport reads the request from (``receive``, or a replay of the body read here)."""
        request = Request(scope, receive)
        headers = request.headers
        if request.method != "POST" or headers.get("mcp-method") != "tools/call":
            return receive
        if await self.security.validate_request(request, is_post=True) is not None:
            return receive
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse):
            return receive
        body = await request.body()
        found = self._plain(body, headers)
        if found is None:
            return _replay(body, receive)
        call, version = found
        await _Exchange(self.stamp, scope, receive, send).serve(request, call, version)
        return None

    def _plain(self, body: bytes, headers: Headers) -> tuple[calls.PlainCall, str] | None:
        """The plain call ``body`` holds, with its protocol version, if the SDK would hand
        it to ``calls.call_tool`` as it is; None otherwise."""
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(decoded, dict) or decoded.get("jsonrpc") != "2.0":
            return None
        request_id = decoded.get("id")
        params = decoded.get("params")
        if (
            isinstance(request_id, bool)  # the SDK's RequestId: a strict int or a string
            or not isinstance(request_id, int | str)
            or decoded.get("method") != "tools/call"
            or not isinstance(params, dict)
            or not params.keys() <= PARAM_KEYS
            or params.get("name") == results.STATUS_TOOL
        ):
            return None
        if find_duplicated_routing_header(headers.items()) is not None:
            return None
        verdict = classify_inbound_request(decoded, headers=dict(headers))
        if not isinstance(verdict, InboundModernRoute):
            return None
        raw_meta = params["_meta"]  # the ladder found it a mapping
        caps = verdict.client_capabilities
        if (
            not isinstance(raw_meta, dict)
            or not raw_meta.keys().isdisjoint(NOT_PLAIN_META)
            or not isinstance(caps, dict)
            or "extensions" in caps
        ):
            return None
        version = verdict.protocol_version
        if _surely_valid(body, params, raw_meta):
            name, arguments, client = params["name"], params.get("arguments"), "mcp"
        else:
            try:
                _methods.validate_client_request("tools/call", version, params)
                typed = CallToolRequestParams.model_validate(params, by_name=False)
            except (KeyError, ValueError):  # pydantic's ValidationError is a ValueError
                return None
            name, arguments, client = typed.name, typed.arguments, _client_name(verdict)
        return calls.PlainCall(request_id, name, arguments, dict(raw_meta), client), version


def _surely_valid(body: bytes, params: dict[str, Any], raw_meta: dict[str, Any]) -> bool:
    """Whether the SDK's validation of these ``tools/call`` params (the version's surface,
    then ``CallToolRequestParams``) surely passes, so that it need not run: a string name,
    an object (or null, or no) ``arguments``, empty client capabilities, no other reserved
    ``_meta`` key (client info, log level: the models type those; every other key may
    hold anything), and no UTF-16 surrogate anywhere in the body (the models refuse a
    lone one in a key). Anything else is validated by the SDK's models."""
    arguments = params.get("arguments")
    return (
        type(params.get("name")) is str
        and (arguments is None or type(arguments) is dict)
        and raw_meta.get(CLIENT_CAPABILITIES_META_KEY) == {}
        and not any(key.startswith(RESERVED) for key in raw_meta if key not in ENVELOPE)
        and _SURROGATE_IN_BODY.search(body) is None
    )


def _client_name(verdict: InboundModernRoute) -> str:
    """The name ``calls`` reads from the SDK's connection: the envelope's client info when
    it and the capabilities are well formed (``Connection.from_envelope``), else "mcp"."""
    if verdict.client_info is None:
        return "mcp"
    try:
        info = Implementation.model_validate(verdict.client_info, by_name=False)
        ClientCapabilities.model_validate(verdict.client_capabilities, by_name=False)
    except ValidationError:
        return "mcp"
    return info.name


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body read here given back first."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class _Exchange:
    """One plain call's request and response."""

    def __init__(self, stamp: dict[str, Any], scope: Scope, receive: Receive, send: Send) -> None:
        self.stamp = stamp
        self.scope, self.receive, self.send = scope, receive, send
        self.streaming = False

    async def serve(self, request: Request, call: calls.PlainCall, version: str) -> None:
        status = 200
        try:
            door = calls.Door.of_request(request)
            out = await calls.plain_call(door, call, self.wait)
            if out is None:
                return  # the client went away: nobody to answer
            data = self.encoded(call.request_id, out, version)
        except Exception as exc:  # what the SDK answers for a handler that raised
            error = modern_error_data(exc)
            status = ERROR_CODE_HTTP_STATUS.get(error.code, 200)
            reply = JSONRPCError(jsonrpc="2.0", id=call.request_id, error=error)
            data = jsontext.compact(reply.model_dump(mode="json", by_alias=True, exclude_none=True))
        if self.streaming:
            event = f"event: message\r\ndata: {data}\r\n\r\n".encode()
            await self.send({"type": "http.response.body", "body": event, "more_body": False})
            return
        response = Response(data, status_code=status, media_type="application/json")
        await response(self.scope, self.receive, self.send)

    def encoded(self, request_id: str | int, out: dict[str, Any], version: str) -> str:
        """The JSON-RPC response to ``request_id`` with the result ``out``, as the SDK
        writes it: ``out`` through its result sieve (``sieved``, or the SDK's own for what
        that does not know), the ``serverInfo`` stamp, the envelope, ``json.dumps``."""
        shaped = sieved(out)
        if shaped is not None:
            try:
                data = jsontext.strict(self.envelope(request_id, shaped))
            except (TypeError, ValueError):  # not JSON as it is (NaN, a date): the SDK's
                pass
            else:
                if _SURROGATE_IN_TEXT.search(data) is None:  # the SDK's refuses some
                    return data
        return jsontext.compact(self.envelope(request_id, self.sdk_sieved(out, version)))

    def envelope(self, request_id: str | int, result: dict[str, Any]) -> dict[str, Any]:
        """``JSONRPCResponse(...).model_dump(mode="json", exclude_none=True)`` of a result
        that is JSON already (its fields are ``id`` and the result: no None to drop), with
        the stamp ``ServerRunner._stamp_server_info`` adds."""
        stamp = result.get("_meta")
        if stamp is None:
            result["_meta"] = {SERVER_INFO_META_KEY: self.stamp}
        elif isinstance(stamp, dict) and stamp.get(SERVER_INFO_META_KEY) is None:
            result["_meta"] = {**stamp, SERVER_INFO_META_KEY: self.stamp}
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    @staticmethod
    def sdk_sieved(out: dict[str, Any], version: str) -> dict[str, Any]:
        """``out`` through the SDK's sieve (``ServerRunner._serialize`` for a core result
        of a spec method with no cache hint: ``serves_plain_calls``)."""
        try:
            dumped = _methods.serialize_server_result("tools/call", version, dict(out))
        except ValidationError:
            calls.log.exception("tools/call answered an invalid result")
            invalid = "Handler returned an invalid result"
            raise MCPError(code=INTERNAL_ERROR, message=invalid) from None
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        return dumped

    async def wait(self, run: calls.Run) -> bool:
        """Until ``run`` is done (True) or the client goes away (False); past the SDK's
        window, the response becomes an event stream pinged every ``SSE_WINDOW_S``."""
        while True:
            with anyio.CancelScope(deadline=anyio.current_time() + SSE_WINDOW_S) as waiting:
                run.waiter = waiting  # the run's end cancels it
                if not run.done.is_set():
                    while (await self.receive())["type"] != "http.disconnect":
                        pass
                    return False
            if run.done.is_set():
                return True
            if not self.streaming:
                self.streaming = True
                start = {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
                await self.send(start)
            await self.send({"type": "http.response.body", "body": PING, "more_body": True})


def sieved(out: dict[str, Any]) -> dict[str, Any] | None:
    """What the SDK's result sieve for ``tools/call`` (``CallToolResult`` of 2026-07-28,
    dumped by alias without None) makes of a result of the shapes ``results`` builds (text
    blocks, a ``_meta`` object, a complete result), without validating what the gateway
    built itself: its fields in the model's order, each block's too, None dropped from the
    top of ``_meta`` and from the fields. None for any other shape (the SDK's sieve then
    decides); ``encoded`` leaves to it too what is not JSON as it stands.
    tests/mcp/test_stateless.py holds the two equal."""
    content = out.get("content")
    meta_ = out.get("_meta")
    is_error = out.get("isError")
    if (
        not out.keys() <= RESULT_KEYS
        or out.get("resultType") != "complete"
        or type(content) is not list
        or not (meta_ is None or (type(meta_) is dict and SERVER_INFO_META_KEY not in meta_))
        or not (is_error is None or type(is_error) is bool)
    ):
        return None
    blocks = []
    for block in content:
        if type(block) is not dict or block.keys() != _TEXT_KEYS or block["type"] != "text":
            return None
        text = block["text"]
        if type(text) is not str:
            return None
        blocks.append({"text": text, "type": "text"})
    shaped: dict[str, Any] = {}
    if meta_ is not None:
        shaped["_meta"] = {key: value for key, value in meta_.items() if value is not None}
    shaped["content"] = blocks
    if is_error is not None:
        shaped["isError"] = is_error
    shaped["resultType"] = "complete"
    structured = out.get("structuredContent")
    if structured is not None:
        shaped["structuredContent"] = structured
    return shaped


_TEXT_KEYS = {"type", "text"}
