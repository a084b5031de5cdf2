"""The gateway's problem+json answers as typed exceptions.

Each class mirrors the request error of ``gateway/errors.py`` the gateway raised (same name,
same HTTP status); ``code`` is the stable code of docs/api.md ("Request errors"), and every
other field of the problem document is in ``details``. A call that ran and failed is *not*
an exception: it is an execution whose ``outcome`` is ``failed`` (its ``error`` says why).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx


class ToolgateClientError(Exception):
    """Anything the client could not get an answer for."""


class TransportError(ToolgateClientError):
    """The gateway could not be reached (connection refused, timeout, ...)."""


class ApiError(ToolgateClientError):
    """A problem+json answer (4xx, 5xx) from the gateway."""

    status: int = 0

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        retryable: bool = False,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.retryable = retryable
        self.details: dict[str, Any] = dict(details or {})


class MalformedRequest(ApiError):
    """400: bad JSON, missing or wrong fields, a missing idempotency key, ..."""


class Unauthenticated(ApiError):
    """401: no API key, or an unknown one."""


class Forbidden(ApiError):
    """403: the principal may not do this (e.g. not an approver)."""


class NotFound(ApiError):
    """404: no such execution, tool or approval (or not visible to the caller)."""


class Conflict(ApiError):
    """409: the same call or idempotency key is still in flight, or was used differently."""


class PayloadTooLarge(ApiError):
    """413."""


class UnsupportedMediaType(ApiError):
    """415."""


class IdempotencyMismatch(ApiError):
    """422: the idempotency key was used for other arguments."""


class EditRefused(ApiError):
    """422: an approver's edit of a call's arguments is refused (``argument_not_editable``,
    ``edit_refused``); nothing was decided."""


class ServiceUnavailable(ApiError):
    """503: the store is unreachable (retryable)."""


class ServerError(ApiError):
    """Another 5xx (the gateway never answers one on purpose)."""


BY_STATUS: dict[int, type[ApiError]] = {
    400: MalformedRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: IdempotencyMismatch,
    503: ServiceUnavailable,
}
BY_CODE: dict[str, type[ApiError]] = {
    "argument_not_editable": EditRefused,
    "edit_refused": EditRefused,
}
"""Where one status has several of the gateway's errors, the code says which."""
_PROBLEM_FIELDS = frozenset({"type", "title", "status", "code", "detail", "retryable"})


def raise_for_problem(response: httpx.Response) -> None:
    """Raise the typed error of a 4xx/5xx answer; nothing for a 2xx."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        body = {"code": "http_error", "detail": response.text[:500] or response.reason_phrase}
    status, code = response.status_code, str(body.get("code") or "http_error")
    cls = BY_CODE.get(code) or BY_STATUS.get(
        status, ServerError if status >= 500 else MalformedRequest
    )
    raise cls(
        status,
        code,
        str(body.get("detail") or ""),
        bool(body.get("retryable", False)),
        {k: v for k, v in body.items() if k not in _PROBLEM_FIELDS},
    )
