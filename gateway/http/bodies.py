"""A request's body, read the same way at every door: bounded, whatever its framing.

``read_body`` refuses a declared ``Content-Length`` over the bound before reading a byte,
and a body sent without one (chunked) as soon as it passes it (413 ``payload_too_large``,
:class:`PayloadTooLarge`); ``RequestBounds`` (gateway/http/limits.py) holds every request to
``max_body_bytes`` before, and a route with a smaller bound passes its own. ``decode_json``
makes of it JSON, decoded and bounded by the JSON limits (gateway/jsonlimits.py).
"""

from __future__ import annotations

import anyio
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive

from gateway import jsonlimits
from gateway.errors import MalformedRequest, PayloadTooLarge, UnsupportedMediaType

OFF_LOOP_BYTES = 64 * 1024
"""A body this large is parsed and checked in a worker thread: on the event loop, parsing a
megabyte of small values would hold up every other request for milliseconds."""


async def read_body(
    receive: Receive, limit: int, declared: str | None = None, what: str = "body"
) -> bytes:
    """The request's body read from ``receive`` to its end, as Starlette's ``Request.body``
    reads it, refused past ``limit`` bytes (``declared``: its ``Content-Length``, if any;
    ``what``: the body as the refusal names it, e.g. ``form``). A client that goes away:
    :class:`ClientDisconnect`."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the {what} is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"the {what} is larger than {limit} bytes")
            if not message.get("more_body", False):
                if not chunks:
                    return chunk
                chunks.append(chunk)
                return b"".join(chunks)
            chunks.append(chunk)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()


def replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body``, read already, given back first (to an application that
    reads the body itself: the MCP SDK's transport)."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def decode_json(
    body: bytes,
    content_type: str | None,
    limits: jsonlimits.JsonLimits,
    measure: jsonlimits.Measure = jsonlimits.check,
) -> jsonlimits.Checked:
    """``body`` as JSON (``content_type``: its ``Content-Type``, JSON when absent), decoded
    and bounded by ``limits`` (checked by ``measure``: ``jsonlimits.check_call`` for a body
    that carries a call's arguments): 415 for another type, 400 for what is not JSON or
    passes the limits (``jsonlimits.decode``)."""
    ctype = (content_type or "application/json").split(";")[0].strip()
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise UnsupportedMediaType(f"send Content-Type: application/json (got {ctype!r})")
    try:
        if len(body) > OFF_LOOP_BYTES:
            return await anyio.to_thread.run_sync(jsonlimits.decode_checked, body, limits, measure)
        return jsonlimits.decode_checked(body, limits, measure)
    except jsonlimits.JsonLimitError as exc:
        raise MalformedRequest(exc.message, code=exc.code) from exc
