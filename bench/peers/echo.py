"""The upstream both gateways call in ``bench/peers``: a JSON echo on 127.0.0.1.

    python bench/peers/echo.py --port 8099

``POST /echo`` answers 200 with the request's JSON body as ``{"echo": <body>}``; ``GET /readyz``
answers 200. A raw ASGI app under uvicorn (one process, access log off), so the upstream costs
as little as it can and the same for both gateways.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    if scope["path"] == "/readyz":
        await _respond(send, 200, b'{"ready":true}')
        return
    if scope["method"] != "POST" or scope["path"] != "/echo":
        await _respond(send, 404, b'{"error":"not found"}')
        return
    try:
        payload = json.loads(b"".join(chunks) or b"null")
    except ValueError:
        await _respond(send, 400, b'{"error":"the body is not JSON"}')
        return
    await _respond(send, 200, json.dumps({"echo": payload}).encode())


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
