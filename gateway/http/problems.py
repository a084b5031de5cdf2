"""The one place errors become HTTP responses (RFC 9457 ``application/problem+json``)."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.errors import LimitExceeded, PolicyUnavailable, ToolgateError

log = logging.getLogger("toolgate.server")
PROBLEM_BASE = "https://toolgate.dev/problems/"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def problem(
    status: int, code: str, detail: str, *, retryable: bool = False, **extra: Any
) -> Response:
    """A problem document: every one carries ``code`` and ``retryable`` (docs/api.md), whichever
    door or layer answers it; ``extra``: the error's other fields."""
    body = {
        "type": PROBLEM_BASE + code,
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "code": code,
        "detail": detail,
        "retryable": retryable,
        **extra,
    }
    headers = {}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="toolgate"'
    retry_after = extra.get("retry_after")
    if isinstance(retry_after, int) and retry_after >= 0:
        headers["Retry-After"] = str(retry_after)
    elif status == 503 or (status == 409 and retryable):
        headers["Retry-After"] = "1"
    return Response(
        json.dumps(body, default=str),
        status_code=status,
        media_type="application/problem+json",
        headers=headers,
    )


def error_problem(exc: ToolgateError) -> Response:
    """``exc`` as its problem document: the one mapping of the error tree to HTTP."""
    status = exc.http_status if exc.http_status >= 400 else 500
    return problem(status, exc.code, exc.message, retryable=exc.retryable, **exc.details)


async def toolgate_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ToolgateError)
    response = error_problem(exc)
    # a flood must not flood the log; a policy refusal was logged, with its cause, where it arose
    if response.status_code >= 500 and not isinstance(exc, LimitExceeded | PolicyUnavailable):
        log.warning("%s %s failed: %s", request.method, request.url.path, exc.message)
    return response


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return problem(exc.status_code, code, str(exc.detail))


async def client_gone(request: Request, exc: Exception) -> Response:
    """The client hung up before its body was whole: nobody reads the answer, and it is no
    fault of the gateway's (each one logged with a traceback would let a client fill the
    log)."""
    return problem(400, "client_disconnected", "the client went away before its body ended")


async def unexpected_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem(500, "internal", "the gateway failed to answer; see its log")


HANDLERS = {
    ToolgateError: toolgate_error,
    HTTPException: http_error,
    ClientDisconnect: client_gone,
    Exception: unexpected_error,
}
