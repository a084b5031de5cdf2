"""The 2026-07-28 era's plain ``tools/call``, answered without the SDK's transport.

A stateless ``tools/call`` of a catalogue tool is most of what agents send to ``/mcp``. The
SDK's entry for that era runs each one through a task group of two tasks, a memory stream, a
span, its kernel's connection, session and context objects and a pydantic envelope, which
cost about as much CPU again as the call itself (docs/performance.md). This module answers
exactly such a request itself, with the same bytes, and leaves everything else to the SDK:

- every check the SDK's entry makes first runs here first: the Content-Type (``Host`` and
  ``Origin`` were held whole to the allowed values by the door: ``gateway/mcp/hosts.py``,
  which accepts nothing the SDK's looser check refuses), the method, Accept, the JSON-RPC
  envelope, the routing headers and the protocol-version ladder, the SDK's validation of the
  params for the request's version. Each is a short check that only says yes where the
  SDK's surely does (the headers read in one pass: ``READ``; ``_admitted``, ``_route``,
  ``_surely_valid``), and the SDK's own function decides the rest (``validate_request``,
  ``check_accept_headers``, ``classify_inbound_request``, ``validate_client_request`` then
  ``CallToolRequestParams``);
- a request any of them would refuse, or one that is not a plain call (another method, a
  notification, a batch, the status tool, a dry run, a progress token, the tasks extension,
  URL elicitation (gateway/mcp/elicitation.py),
  params beyond ``name``, ``arguments`` and ``_meta``, an id that is not a string or an
  integer), is handed to the SDK's transport with the body read here, and it answers as it
  would have: nothing of the request is lost or answered twice. The body is read ahead of
  the SDK's body bound, which refuses nothing the gateway's own (``RequestBounds``, the
  same ``max_body_bytes``, outermost) lets through;
- the call runs through ``plain_call`` (``calls.Run``, the code the SDK path runs, and
  ``calls.answer``, the one answer builder of both paths), in the request's own task
  (nobody cancels it, unlike the SDK's handler); its result is shaped as the SDK's
  kernel shapes it (its result sieve for the version, its ``serverInfo`` stamp, the JSON-RPC
  envelope) and written as ``json.dumps`` writes it, member by member (gateway/mcp/writer.py:
  the ``structuredContent`` a text block repeats is encoded once), as JSON, or, when the call
  runs past the SDK's window (``SSE_WINDOW_S``), as one SSE event after keep-alive pings, as
  the SDK does;
- a client that goes away before the answer cancels the execution
  (``calls.cancel_abandoned``), as when the SDK cancels its handler: a task of the exchange
  reads the request's ``receive`` until ``http.disconnect``, which an ASGI server also sends
  once the response is out (the task then ends).

The boundary, all of it here: the endpoint makes a ``StatelessCalls`` only when
``mcp.fast_calls`` is on and ``serves_plain_calls`` finds the server one whose answers this
module knows (``endpoint.build_server``'s), and hands it only the requests of the
2026-07-28 era while the SDK's transport runs; ``StatelessCalls.__call__`` takes from those
exactly the plain calls (``_plain``) and counts each it answers (``served``, which the tests
read to prove which path served). tests/mcp/test_stateless.py sends the same requests, good
and malformed, down both paths and compares the answers.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

import anyio
from mcp.server import Server
from mcp.server.runner import modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundModernRoute,
    classify_inbound_request,
)
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    CallToolRequestParams,
    ClientCapabilities,
    Implementation,
    JSONRPCError,
)
from mcp_types import methods as _methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gateway import jsontext
from gateway.http.bodies import read_body, replay
from gateway.http.heads import Heads, Wanted
from gateway.mcp import calls, context, elicitation, meta, results, sdk_private
from gateway.mcp.writer import Writer

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


def serves_plain_calls(server: Server[Any]) -> bool:
    """Whether this module answers a plain call of ``server`` exactly as the SDK would:
    nothing between the SDK's transport and ``calls.call_tool`` acts on one but the SDK's
    own span (its default middleware, which records to the process-global tracer provider:
    the gateway's spans have their own) and ``calls.legacy_task_call`` (which passes a
    2026-07-28 call through); no ``Mcp-Param-*`` check, no cache hint."""
    *sdk, ours = server.middleware
    return (
        ours is calls.legacy_task_call
        and sdk_private.only_the_sdks_span(sdk)
        and server.get_tool_input_schema is calls.no_param_headers
        and "tools/call" not in server.cache_hints
        and server.get_request_handler("tools/call") is not None
    )


class StatelessCalls:
    """Answers the plain calls of the 2026-07-28 era for ``server`` (see the module)."""

    def __init__(
        self, server: Server[Any], security: TransportSecuritySettings, max_body_bytes: int
    ) -> None:
        self.server = server
        self.max_body_bytes = max_body_bytes
        self.served = 0
        """How many requests this answered (the SDK's transport answered the others)."""
        self.security = TransportSecurityMiddleware(security)
        self.writer = Writer(server.server_info_stamp)
        """With the SDK's ``serverInfo`` stamp: the SDK copies it for every answer, in case
        an answer is changed afterwards; this one is only encoded."""

    async def __call__(self, request: Request, heads: Heads, send: Send) -> Receive | None:
        """Answer the request (its headers read: ``heads``) if it is a plain call (None),
        else return what the SDK's transport reads the request from (its ``receive``, or a
        replay of the body read here)."""
        scope, receive = request.scope, request.receive
        if scope["method"] != "POST":
            return receive
        if heads.first.get("mcp-method") != "tools/call" or not heads.certain:
            return receive
        if not self._admitted(heads) and (
            await self.security.validate_request(request, is_post=True) is not None
        ):
            return receive
        if heads.first.get("accept") not in _BOTH_ACCEPTED:
            has_json, has_sse = check_accept_headers(request)
            if not (has_json and has_sse):
                return receive
        # Bounded as every body is (RequestBounds refused past this before, in any framing).
        limit = self.max_body_bytes
        body = await read_body(receive, limit, heads.first.get("content-length"))
        found = self._plain(body, heads)
        if found is None:
            return replay(body, receive)
        call, version = found
        self.served += 1
        await _Exchange(self.writer, scope, receive, send).serve(request, heads, call, version)
        return None

    def _admitted(self, heads: Heads) -> bool:
        """Whether the SDK's ``validate_request`` (POST) surely passes (its Host and Origin
        checks do for every request the door let through: ``hosts.HostGuard``); when this
        cannot tell, the SDK's check decides."""
        content_type = heads.first.get("content-type")
        return content_type is not None and content_type.lower().startswith("application/json")

    def _plain(self, body: bytes, heads: Heads) -> tuple[PlainCall, str] | None:
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
            not is_request_id(request_id)
            or decoded.get("method") != "tools/call"
            or not isinstance(params, dict)
            or not params.keys() <= PARAM_KEYS
            or params.get("name") == results.STATUS_TOOL
        ):
            return None
        if duplicated(heads):
            return None
        verdict = _route(decoded, params, heads)
        if verdict is None:
            return None
        version, client_info, caps = verdict
        raw_meta = params["_meta"]  # the ladder found it a mapping
        if (
            not isinstance(raw_meta, dict)
            or not raw_meta.keys().isdisjoint(NOT_PLAIN_META)
            or not isinstance(caps, dict)
            or "extensions" in caps
            or elicitation.declared(caps)  # its parked call asks through the protocol
        ):
            return None
        if _surely_valid(body, params, raw_meta):
            name, arguments, client = params["name"], params.get("arguments"), "mcp"
        else:
            try:
                _methods.validate_client_request("tools/call", version, params)
                typed = CallToolRequestParams.model_validate(params, by_name=False)
            except (KeyError, ValueError):  # pydantic's ValidationError is a ValueError
                return None
            name, arguments, client = typed.name, typed.arguments, _client_name(client_info, caps)
        return PlainCall(request_id, name, arguments, dict(raw_meta), client), version


def is_request_id(value: object) -> TypeGuard[str | int]:
    """A JSON-RPC request id as the SDK's ``RequestId`` takes it: a string or a strict
    integer (``true`` is no id, nor is ``1.5``)."""
    return isinstance(value, int | str) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class PlainCall:
    """A 2026-07-28 ``tools/call`` of a catalogue tool that asks for no plan, no task and no
    progress: what this module serves without the SDK's transport."""

    request_id: str | int
    name: str
    arguments: Mapping[str, Any] | None
    meta: dict[str, Any]
    client_name: str


class Watch(Protocol):
    """What a transport does while a plain call runs in its request's task."""

    def start(self, door: context.Door, run: calls.Run) -> None:
        """``run`` begins: watch the client, and cancel its execution if it goes away
        (``calls.cancel_abandoned``) before ``run`` is done."""

    def abort(self) -> None:
        """``run`` was interrupted (the request's task was cancelled): stop watching."""

    async def ended(self) -> bool:
        """``run`` is done: whether its client still waits for the answer."""


async def plain_call(door: context.Door, call: PlainCall, watch: Watch) -> calls.Answer | None:
    """The answer to ``call`` as ``calls.call_tool`` gives it, or None when the client went
    away before the end (the execution is then cancelled, as when the SDK cancels a
    handler)."""
    try:
        answer = await _run_plain(door, call, watch)
    except Exception as exc:
        answer = calls.failed(exc, call.name), None
    if answer is not None:
        answer[0].setdefault("resultType", "complete")
    return answer


async def _run_plain(door: context.Door, call: PlainCall, watch: Watch) -> calls.Answer | None:
    request = calls.execution_request(
        door, call.meta, call.name, call.arguments, call.request_id, call.client_name
    )
    running = door.services.admission.executions
    running.take(door.principal)  # given back by ``Run.drive``
    run = calls.Run(door.services, request)
    try:
        watch.start(door, run)
        await run.drive()
    except BaseException:
        if not run.finished:
            running.give_back(door.principal)
        watch.abort()
        raise
    if not await watch.ended():
        return None
    return await calls.answer(door, run)


_BOTH_ACCEPTED = frozenset(
    {"application/json, text/event-stream", "text/event-stream, application/json"}
)
"""``Accept`` values ``check_accept_headers`` surely finds both types in (what clients send);
any other value is checked by it."""


_ROUTING = frozenset({MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER, MCP_NAME_HEADER})
READ = Wanted(
    {*_ROUTING, "content-type", "host", "origin", "accept", "content-length", *context.DOOR_HEADERS}
)
"""The headers this module, the endpoint and ``context.Door`` read (``Heads.of``, once per
request): the SDK's transport would serve a request differently from what this module
assumes when one comes in other than lower case, or ``Content-Length`` is not digits (its
body bound parses it with ``int``), or a routing header comes twice
(``find_duplicated_routing_header``): those go to it."""


def duplicated(heads: Heads) -> bool:
    """A routing header came more than once (``find_duplicated_routing_header``)."""
    return not heads.repeated.isdisjoint(_ROUTING)


def _route(
    decoded: dict[str, Any], params: dict[str, Any], heads: Heads
) -> tuple[str, Any, Any] | None:
    """What ``classify_inbound_request`` finds a ``tools/call`` to be (its version, client
    info and capabilities) when it surely routes it (the envelope there, the headers equal
    to it, a served version); else the SDK's ladder decides."""
    meta_ = params.get("_meta")
    version = heads.first.get(MCP_PROTOCOL_VERSION_HEADER)
    name = heads.first.get(MCP_NAME_HEADER)
    if (
        type(meta_) is dict
        and CLIENT_CAPABILITIES_META_KEY in meta_
        and version is not None
        and meta_.get(PROTOCOL_VERSION_META_KEY) == version
        and version in MODERN_PROTOCOL_VERSIONS
        and heads.first.get(MCP_METHOD_HEADER) == decoded.get("method")
        and (name is None or not name.startswith("=?"))
        and (params.get("name") is None or name == params["name"])
    ):
        return version, meta_.get(CLIENT_INFO_META_KEY), meta_[CLIENT_CAPABILITIES_META_KEY]
    verdict = classify_inbound_request(decoded, headers=heads.first)
    if not isinstance(verdict, InboundModernRoute):
        return None
    return verdict.protocol_version, verdict.client_info, verdict.client_capabilities


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
        and all(key in ENVELOPE or not key.startswith(RESERVED) for key in raw_meta)
        and (
            (b"\\u" not in body and b"\xed" not in body) or _SURROGATE_IN_BODY.search(body) is None
        )
    )


def _client_name(client_info: Any, caps: Any) -> str:
    """The name ``calls`` reads from the SDK's connection: the envelope's client info when
    it and the capabilities are well formed (``Connection.from_envelope``), else "mcp"."""
    if client_info is None:
        return "mcp"
    try:
        info = Implementation.model_validate(client_info, by_name=False)
        ClientCapabilities.model_validate(caps, by_name=False)
    except ValidationError:
        return "mcp"
    return info.name


class _Exchange:
    """One plain call's request and response; the ``Watch`` of its run, which runs in
    the request's task: a task reads the request's ``receive`` until the client goes away
    (then cancels the execution, unless the run is done) or the response is sent (an ASGI
    server then answers ``http.disconnect``); past the SDK's window a timer turns the
    response into an event stream, pinged by a task of its own."""

    __slots__ = (
        "door",
        "finished",
        "gone",
        "pinger",
        "receive",
        "run",
        "scope",
        "send",
        "stop",
        "streaming",
        "watcher",
        "window",
        "writer",
    )

    def __init__(self, writer: Writer, scope: Scope, receive: Receive, send: Send) -> None:
        self.writer = writer
        self.scope, self.receive, self.send = scope, receive, send
        self.streaming = False
        self.door: context.Door | None = None
        self.run: calls.Run | None = None
        self.gone = False
        """The client went away before the run was done (the watcher cancels it)."""
        self.finished = False
        self.watcher: asyncio.Task[None] | None = None
        self.window: asyncio.TimerHandle | None = None
        self.pinger: asyncio.Task[None] | None = None
        self.stop: asyncio.Event | None = None

    async def serve(self, request: Request, heads: Heads, call: PlainCall, version: str) -> None:
        status = 200
        try:
            door = context.Door.of_request(request, heads.first)
            answer = await plain_call(door, call, self)
            if answer is None:
                return  # the client went away: nobody to answer
            out, text = answer
            data = self.writer.encoded(call.request_id, out, version, text)
        except Exception as exc:  # what the SDK answers for a handler that raised
            error = modern_error_data(exc)
            status = ERROR_CODE_HTTP_STATUS.get(error.code, 200)
            reply = JSONRPCError(jsonrpc="2.0", id=call.request_id, error=error)
            data = jsontext.compact(reply.model_dump(mode="json", by_alias=True, exclude_none=True))
        if self.streaming:
            event = f"event: message\r\ndata: {data}\r\n\r\n".encode()
            await self.send({"type": "http.response.body", "body": event, "more_body": False})
            return
        # Starlette's Response(data, status_code=status, media_type="application/json").
        body = data.encode()
        headers = [(b"content-length", str(len(body)).encode()), _JSON_TYPE]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    # -- Watch --------------------------------------------------------------------

    def start(self, door: context.Door, run: calls.Run) -> None:
        loop = asyncio.get_running_loop()
        self.door, self.run = door, run
        self.watcher = loop.create_task(self._watch())
        self.window = loop.call_later(SSE_WINDOW_S, self._open_stream)

    def abort(self) -> None:
        self.finished = True
        if self.window is not None:
            self.window.cancel()
        if self.stop is not None:
            self.stop.set()

    async def ended(self) -> bool:
        self.abort()
        if self.pinger is not None:
            await asyncio.wait((self.pinger,))  # a ping being sent is sent whole
        if self.gone:
            assert self.watcher is not None
            await self.watcher  # it cancels the execution
            return False
        return True

    async def _watch(self) -> None:
        """Until the client goes away, or the response was sent."""
        while (await self.receive())["type"] != "http.disconnect":
            pass
        assert self.door is not None and self.run is not None
        if self.run.finished:
            return
        self.gone = True
        with anyio.CancelScope(shield=True):
            await calls.cancel_abandoned(self.door, self.run)

    def _open_stream(self) -> None:
        """The SDK's window passed with the run still going: stream the response."""
        if not self.finished:
            self.stop = asyncio.Event()
            self.pinger = asyncio.get_running_loop().create_task(self._pings())

    async def _pings(self) -> None:
        """The event stream's start, then a ping every ``SSE_WINDOW_S`` until the run ends
        (``ended`` waits for a ping being sent: the answer comes after it)."""
        assert self.stop is not None
        while not self.finished:
            if not self.streaming:
                start = {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
                await self.send(start)
                self.streaming = True
            await self.send({"type": "http.response.body", "body": PING, "more_body": True})
            with anyio.move_on_after(SSE_WINDOW_S):
                await self.stop.wait()


_JSON_TYPE = (b"content-type", b"application/json")
