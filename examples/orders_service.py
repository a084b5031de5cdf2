"""A small orders HTTP service behind the tools ``http.get_json``, ``orders.create`` and
``orders.get``: a real Starlette app with in-memory state.

    .venv/bin/python -m examples.orders_service --port 8090    # what toolgate.yaml expects

Endpoints:

- ``GET /items/{id}`` — an item of a fixed catalogue (404 for an unknown id).
- ``POST /orders`` — ``{"item_id": int, "quantity": int, "note"?: str}`` → 201 and the order.
  With an ``Idempotency-Key`` header the same key returns the same order (201, header
  ``Idempotent-Replayed: true``) and never makes a second one; the same key with another
  body is 422. ``?delay_ms=N`` commits the order at once and answers N ms later (a response
  that can be lost).
- ``GET /orders?idempotency_key=K`` — the order made with key K, or 404.
- ``GET /orders/{id}`` — one order, or 404.
- ``GET|POST /slow?seconds=S`` — answers after S seconds; changes nothing.
- ``GET /flaky?after=N&status=429`` — always that status with ``Retry-After: N``.
- ``GET /redirect?to=URL&status=302`` — a redirect; ``/echo`` — the request as JSON;
  ``/big?bytes=N`` — a JSON document of about N bytes; ``/healthz``.

When ``ORDERS_API_TOKEN`` is set (or ``--token`` is given), ``/orders`` needs
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

ITEMS: dict[int, dict[str, Any]] = {
    1: {"id": 1, "name": "widget", "price_cents": 250, "stock": 100},
    2: {"id": 2, "name": "gadget", "price_cents": 1299, "stock": 12},
    3: {"id": 3, "name": "gizmo", "price_cents": 499, "stock": 0},
}


@dataclass
class OrderBook:
    """The service's state: orders by id and the idempotency keys that made them."""

    token: str | None = None
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_key: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Idempotency key → (order id, sha256 of the request body)."""

    def create(self, payload: dict[str, Any], key: str | None, digest: str) -> tuple[dict, bool]:
        """(order, replayed). Runs without awaiting, so two requests cannot interleave."""
        if key is not None and key in self.by_key:
            order_id, first = self.by_key[key]
            if first != digest:
                raise ValueError("this Idempotency-Key was used with a different body")
            return self.orders[order_id], True
        order = {
            "id": f"ord_{len(self.orders) + 1}",
            "item_id": payload["item_id"],
            "quantity": payload["quantity"],
            "note": payload.get("note"),
            "status": "created",
            "idempotency_key": key,
            "created_at": time.time(),
        }
        self.orders[order["id"]] = order
        if key is not None:
            self.by_key[key] = (order["id"], digest)
        return order, False


def _problem(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _book(request: Request) -> OrderBook:
    book: OrderBook = request.app.state.book
    return book


def _authorised(request: Request) -> bool:
    token = _book(request).token
    return token is None or request.headers.get("authorization") == f"Bearer {token}"


async def get_item(request: Request) -> Response:
    item = ITEMS.get(int(request.path_params["item_id"]))
    if item is None:
        return _problem(404, "no such item")
    return JSONResponse(item, headers={"X-Request-Id": f"req_{uuid.uuid4().hex[:12]}"})


async def _pause(request: Request, seconds: float) -> None:
    """Sleep up to ``seconds``, stopping early when the client has gone away."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        await anyio.sleep(min(left, 0.05))
        if await request.is_disconnected():
            return


def _order_payload(raw: bytes) -> dict[str, Any] | str:
    try:
        payload = json.loads(raw)
    except ValueError:
        return "the body is not JSON"
    if not isinstance(payload, dict):
        return "the body must be a JSON object"
    for name in ("item_id", "quantity"):
        if not isinstance(payload.get(name), int) or isinstance(payload.get(name), bool):
            return f"{name} must be an integer"
    if payload["item_id"] not in ITEMS:
        return "no such item"
    if payload["quantity"] < 1:
        return "quantity must be at least 1"
    return payload


async def create_order(request: Request) -> Response:
    if not _authorised(request):
        return _problem(401, "missing or wrong bearer token")
    raw = await request.body()
    payload = _order_payload(raw)
    if isinstance(payload, str):
        return _problem(422, payload)
    key = request.headers.get("idempotency-key")
    try:
        order, replayed = _book(request).create(payload, key, hashlib.sha256(raw).hexdigest())
    except ValueError as exc:
        return _problem(422, str(exc))
    await _pause(request, int(request.query_params.get("delay_ms", "0")) / 1000)
    headers = {"Location": f"/orders/{order['id']}", "X-Request-Id": f"req_{uuid.uuid4().hex[:12]}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(order, status_code=201, headers=headers)


async def find_orders(request: Request) -> Response:
    if not _authorised(request):
        return _problem(401, "missing or wrong bearer token")
    key = request.query_params.get("idempotency_key")
    if key is None:
        return JSONResponse({"orders": list(_book(request).orders.values())})
    found = _book(request).by_key.get(key)
    if found is None:
        return _problem(404, "no order was made with this idempotency key")
    return JSONResponse(_book(request).orders[found[0]])


async def get_order(request: Request) -> Response:
    if not _authorised(request):
        return _problem(401, "missing or wrong bearer token")
    order = _book(request).orders.get(request.path_params["order_id"])
    return JSONResponse(order) if order else _problem(404, "no such order")


async def slow(request: Request) -> Response:
    seconds = float(request.query_params.get("seconds", "5"))
    await _pause(request, seconds)
    return JSONResponse({"slept": seconds})


async def flaky(request: Request) -> Response:
    status = int(request.query_params.get("status", "429"))
    after = request.query_params.get("after", "2")
    return _problem(status, "try again later", **{"Retry-After": after})


async def redirect(request: Request) -> Response:
    status = int(request.query_params.get("status", "302"))
    return RedirectResponse(request.query_params.get("to", "/healthz"), status_code=status)


async def echo(request: Request) -> Response:
    raw = await request.body()
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "query": [[k, v] for k, v in request.query_params.multi_items()],
            "headers": dict(request.headers),
            "body": body,
        }
    )


async def big(request: Request) -> Response:
    size = int(request.query_params.get("bytes", "100000"))
    return JSONResponse({"data": "x" * size})


async def healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


def create_app(token: str | None = None) -> Starlette:
    """The service; ``app.state.book`` holds its orders (tests look at it)."""
    routes = [
        Route("/items/{item_id:int}", get_item, methods=["GET"]),
        Route("/orders", create_order, methods=["POST"]),
        Route("/orders", find_orders, methods=["GET"]),
        Route("/orders/{order_id}", get_order, methods=["GET"]),
        Route("/slow", slow, methods=["GET", "POST"]),
        Route("/flaky", flaky, methods=["GET", "POST"]),
        Route("/redirect", redirect, methods=["GET", "POST"]),
        Route("/echo", echo, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        Route("/big", big, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.state.book = OrderBook(token=token)
    return app


@contextlib.contextmanager
def serving(app: Starlette, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread; yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", ws="none", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the example service did not start")
            time.sleep(0.01)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--token", default=os.environ.get("ORDERS_API_TOKEN"))
    args = parser.parse_args()
    uvicorn.run(create_app(args.token), host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
