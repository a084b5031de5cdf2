"""The physical ceiling for ``bench/run.py``: a bare Starlette app under the gateway's uvicorn
settings, with one ``POST`` endpoint that parses a JSON body and returns a JSON body.

    .venv/bin/python bench/bare_app.py --port 8099 --response-bytes 1900

``POST /echo`` reads the whole body, ``json.loads`` it, and answers ``200`` with
``{"echo": <the parsed body>, "pad": "xxx..."}`` serialised by Starlette's ``JSONResponse``,
the pad sized so that the response is ``--response-bytes`` long (the size of the gateway's
answer to the same request, measured by the harness). It does nothing else: no auth, no
store, no policy. ``GET /readyz`` answers ``200`` for the harness's start-up probe.

uvicorn runs it exactly as ``toolgate serve`` runs the gateway (gateway/cli.py): one process
(``--workers N``: N processes, uvicorn's own supervisor, the ceiling for ``serve --workers N``),
``access_log=False``, ``server_header=False``, ``log_level`` from ``--log-level`` (the harness
passes ``warning`` to both), default loop and HTTP implementation.
"""

from __future__ import annotations

import argparse
import json
import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

_WRAPPER = len('{"echo":,"pad":""}')


def create_app(response_bytes: int) -> Starlette:
    async def echo(request: Request) -> Response:
        raw = await request.body()
        parsed = json.loads(raw)
        # JSONResponse renders compactly (separators "," and ":"), so for a compact request
        # body the response is len(raw) + the wrapper + the pad: response_bytes in all.
        pad = "x" * max(response_bytes - len(raw) - _WRAPPER, 0)
        return JSONResponse({"echo": parsed, "pad": pad})

    async def readyz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/echo", echo, methods=["POST"]),
            Route("/readyz", readyz, methods=["GET"]),
        ]
    )


def from_env() -> Starlette:
    """The app for uvicorn's worker processes (``--workers N``): its size from the environment."""
    return create_app(int(os.environ["BARE_RESPONSE_BYTES"]))


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--response-bytes", type=int, default=2048)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--workers", type=int, default=1, help="processes (uvicorn's workers)")
    args = parser.parse_args()
    if args.workers > 1:  # the ceiling for `toolgate serve --workers N`
        os.environ["BARE_RESPONSE_BYTES"] = str(args.response_bytes)
        uvicorn.run(
            "bare_app:from_env",
            factory=True,
            app_dir=os.path.dirname(os.path.abspath(__file__)),
            workers=args.workers,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=False,
            server_header=False,
        )
        return
    uvicorn.run(
        create_app(args.response_bytes),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        server_header=False,
    )


if __name__ == "__main__":
    main()
