"""One error tree for the whole gateway.

Every error carries a stable ``code``, the pipeline ``phase`` it belongs to (or ``None``
for errors about the HTTP request itself), ``retryable`` and a message written for the
agent. Foreign exceptions are translated into these at the edge that meets them
(``raise ... from exc``); the HTTP mapping lives only in ``gateway.http.problems``.

    ToolgateError
    ├── RequestError            the request itself is unusable (HTTP 4xx, no execution)
    │   ├── MalformedRequest    400  bad JSON, missing/wrong fields
    │   ├── PayloadTooLarge     413
    │   ├── UnsupportedMediaType 415
    │   ├── Unauthenticated     401
    │   ├── Forbidden           403
    │   ├── NotFound            404
    │   ├── Conflict            409  same call_id/idempotency key in flight or different
    │   ├── IdempotencyMismatch 422
    │   ├── EditRefused         422  an approver's edit of a call's arguments is refused
    │   └── LimitExceeded       a bound on load (gateway/runtime/admission.py), retryable
    │       ├── TooManyRequests 429  one principal holds its share
    │       └── Overloaded      503  the process holds all it may, for everyone together
    ├── ConfigError             a declaration, policy or setting is wrong (names file/line/key)
    │   └── ReloadRefused       422  a reload found faults: nothing changed
    ├── CannotListen            ``serve`` cannot bind its address (in use, not allowed)
    ├── CallError               the call was accepted but ends failed in a phase
    │   ├── ResolveError        phase=resolve
    │   ├── ValidationError     phase=validate
    │   ├── PolicyDenied        phase=policy
    │   ├── ExecutionError      phase=execute
    │   └── VerificationError   phase=verify
    ├── PolicyUnavailable       503  the policy backend gave no decision (retryable): nothing ran
    └── StoreError              the store failed (retryable)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.types import Phase


class ToolgateError(Exception):
    code: str = "internal"
    phase: Phase | None = None
    retryable: bool = False
    http_status: int = 500

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retryable: bool | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.details: dict[str, Any] = dict(details or {})

    def to_json(self) -> dict[str, Any]:
        """The ``error`` object of a ToolResult."""
        out: dict[str, Any] = {
            "type": self.code,
            "phase": self.phase.value if self.phase else None,
            "retryable": self.retryable,
            "message": self.message,
        }
        out.update(self.details)
        return out


class RequestError(ToolgateError):
    code = "bad_request"
    http_status = 400


class MalformedRequest(RequestError):
    code = "malformed_request"
    http_status = 400


class PayloadTooLarge(RequestError):
    code = "payload_too_large"
    http_status = 413


class UnsupportedMediaType(RequestError):
    code = "unsupported_media_type"
    http_status = 415


class Unauthenticated(RequestError):
    code = "unauthenticated"
    http_status = 401


class Forbidden(RequestError):
    code = "forbidden"
    http_status = 403


class NotFound(RequestError):
    code = "not_found"
    http_status = 404


class Conflict(RequestError):
    code = "conflict"
    http_status = 409
    retryable = True


class LimitExceeded(RequestError):
    """A bound on load was reached; nothing was done. ``retry_after`` (seconds) is the
    ``Retry-After`` of the answer, also in ``details`` (with the setting that bounds it)."""

    code = "limit_exceeded"
    http_status = 429
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retry_after: int = 1,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        extra = {**(details or {}), "retry_after": retry_after}
        super().__init__(message, code=code, details=extra)
        self.retry_after = retry_after


class TooManyRequests(LimitExceeded):
    code = "too_many_requests"
    http_status = 429


class Overloaded(LimitExceeded):
    code = "overloaded"
    http_status = 503


class IdempotencyMismatch(RequestError):
    code = "idempotency_key_reused"
    http_status = 422


class EditRefused(RequestError):
    """An approver's edit of a parked call is refused: the approval stays pending."""

    code = "edit_refused"
    http_status = 422


class ConfigError(ToolgateError):
    """A configuration, declaration or policy source is invalid.

    ``problems`` holds every fault found, each already naming file, line and key.
    """

    code = "config_invalid"

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class ReloadRefused(ConfigError):
    """A reload found faults in tools.d, rego/ or policies/ (or the adapters' checks): the
    running set is kept. ``details``: ``faults`` and the ``revisions`` still running."""

    code = "reload_refused"
    http_status = 422

    def __init__(self, problems: list[str], revisions: Mapping[str, str]) -> None:
        super().__init__(problems)
        count = len(self.problems)
        self.message = (
            f"the reload was refused ({count} fault{'s' if count != 1 else ''}): "
            "nothing changed, the running set is kept"
        )
        self.details = {"faults": list(self.problems), "revisions": dict(revisions)}


class CannotListen(ToolgateError):
    """``toolgate serve`` cannot bind its host and port; the message says why and what to
    change (gateway/http/server.py::listen)."""

    code = "cannot_listen"


class CallError(ToolgateError):
    """Ends an execution as ``failed`` in ``phase``."""

    http_status = 200


class ResolveError(CallError):
    code = "tool_not_found"
    phase = Phase.RESOLVE


class ValidationError(CallError):
    code = "invalid_arguments"
    phase = Phase.VALIDATE


class PolicyDenied(CallError):
    code = "policy_denied"
    phase = Phase.POLICY


class ExecutionError(CallError):
    code = "execution_failed"
    phase = Phase.EXECUTE


class VerificationError(CallError):
    code = "verification_failed"
    phase = Phase.VERIFY


class PolicyUnavailable(ToolgateError):
    """The policy backend gave no decision (it did not answer in time, could not be reached,
    or answered with something other than a decision): fail closed, nothing ran, and a
    retry may pass once it answers again. ``cause`` is the kind of fault (``timeout``,
    ``connection``, ``status``, ``not_json``) for the metrics; what exactly happened is in
    the gateway's log, never in the message, which is written for the agent.

    A new call refused so is a 503 (``Retry-After``) and no execution; an execution that
    already existed (queued, or resumed after approval) ends ``failed`` with it in phase
    ``policy`` (docs/failures.md#policy-backend-unavailable)."""

    code = "policy_unavailable"
    phase = Phase.POLICY
    retryable = True
    http_status = 503
    RETRY_AFTER = 1

    def __init__(self, cause: str) -> None:
        super().__init__(
            "the policy could not be asked (the policy backend did not answer), so nothing "
            "ran; a retry may pass once it answers again",
            details={"retry_after": self.RETRY_AFTER},
        )
        self.cause = cause


class StoreError(ToolgateError):
    code = "store_unavailable"
    retryable = True
    http_status = 503


UNRECORDED: tuple[type[ToolgateError], ...] = (RequestError, PolicyUnavailable, StoreError)
"""What the pipeline lets through to the door rather than record as the call's outcome: the
request is refused before it became an execution (4xx; ``policy_unavailable``, 503), or the
store cannot record anything now (503)."""
