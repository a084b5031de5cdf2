"""What came back, as the adapter's outcome: status → outcome and error, body within
the budget (JSON parsed where it is JSON), selected headers, the provider's response id as
evidence, every secret of the call redacted. Also the ``http_get`` probe's reading."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from gateway.adapters.base import AdapterOutcome, Evidence
from gateway.adapters.base import SideEffectReport as Effect
from gateway.adapters.http.options import HttpOptions, parse_json_path
from gateway.adapters.http.request import Redactor, as_text
from gateway.adapters.shared.egress import EgressPolicy
from gateway.adapters.shared.urls import URL
from gateway.declarations.templates import TemplateError, lookup
from gateway.errors import ExecutionError
from gateway.types import JSON, Outcome

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
IDEMPOTENT_METHODS = SAFE_METHODS | {"PUT", "DELETE"}
"""RFC 9110 §9.2: repeating these has the effect of sending them once."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One request (or probe) ready to send: everything decided, nothing sent."""

    method: str
    url: URL
    headers: tuple[tuple[str, str], ...]
    content: bytes | None
    policy: EgressPolicy
    redactor: Redactor
    credential_headers: frozenset[str]
    """Dropped when a redirect leaves the origin."""
    redirects: int
    retry_safe: bool
    """Repeating it cannot duplicate a side effect (idempotent method, or a provider key)."""
    budget: int
    """Bytes of body to keep (the output budget)."""
    floor: float = 0.0
    """Seconds it may always take, even past the call's deadline (probes)."""


@dataclass(frozen=True, slots=True)
class Exchange:
    """What came back for a plan: the final response and its body within the budget."""

    method: str
    url: URL
    status: int
    headers: Mapping[str, str]
    """Case-insensitive, as the client gives them."""
    body: bytes
    truncated: bool
    body_error: str | None = None
    hops: tuple[str, ...] = ()


def parse_retry_after(value: str | None, now: float | None = None) -> int | None:
    """``Retry-After`` (delta-seconds or an HTTP date) in milliseconds, or None."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return int(text) * 1000
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    current = time.time() if now is None else now
    return max(int((when.timestamp() - current) * 1000), 0)


def _is_success(status: int, declared: tuple[int, ...]) -> bool:
    return status in declared if declared else 200 <= status < 300


def status_error(plan: Plan, ex: Exchange, declared: tuple[int, ...]) -> ExecutionError:
    status = ex.status
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "unknown status"
    what = f"{ex.method} {ex.url.with_query(None)} answered {status} {phrase}"
    details: dict[str, Any] = {"status": status}
    retry_after = parse_retry_after(ex.headers.get("retry-after"))
    if retry_after is not None:
        details["retry_after_ms"] = retry_after
    if 300 <= status < 400:
        code, retryable = "http_redirect", False
        what += f" (to {ex.headers.get('location', '?')}; this tool follows {plan.redirects})"
    elif status in (408, 429):
        code, retryable = ("http_rate_limited" if status == 429 else "http_request_timeout"), True
        if retry_after is not None:
            what += f"; retry after {retry_after / 1000:g} s"
    elif 400 <= status < 500:
        code, retryable = "http_client_error", False
    elif status >= 500:
        code, retryable = "http_server_error", ex.method in IDEMPOTENT_METHODS
    else:
        code, retryable = "http_unexpected_status", False
    return ExecutionError(what, code=code, retryable=retryable, details=details)


def _decode(raw: bytes, ctype: str, truncated: bool) -> tuple[JSON, str]:
    """(body, encoding): parsed JSON, text, or base64 for binary bodies."""
    if not raw:
        return None, "empty"
    mime = ctype.split(";")[0].strip().lower()
    if (mime == "application/json" or mime.endswith("+json")) and not truncated:
        try:
            return json.loads(raw), "json"
        except ValueError:
            pass
    textual = mime.startswith("text/") or "charset=" in ctype.lower() or "json" in mime
    if textual or mime.endswith(("xml", "javascript", "x-www-form-urlencoded")):
        return raw.decode("utf-8", "replace"), "text"
    try:
        return raw.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def _response_id(opts: HttpOptions, ex: Exchange, body: JSON) -> Evidence | None:
    spec = opts.response_id
    if spec is None:
        return None
    if spec.header is not None:
        value, source = ex.headers.get(spec.header), f"header {spec.header}"
    else:
        path = spec.json_path or ()
        try:
            value = lookup({"$": body}, ("$", *path)) if path else None
        except TemplateError:
            value = None
        source = f"json {'.'.join(path)}"
    if value is None or value == "":
        return None
    return Evidence("http_response_id", as_text(value), None, {"source": source})


def outcome_of(plan: Plan, ex: Exchange, opts: HttpOptions) -> AdapterOutcome:
    red = plan.redactor
    raw = red.raw(ex.body)
    body, encoding = _decode(raw, ex.headers.get("content-type", ""), ex.truncated)
    body = red.json(body)
    data: dict[str, JSON] = {
        "status": ex.status,
        "url": red.text(str(ex.url)),
        "headers": {n: red.text(v) for n in opts.response_headers if (v := ex.headers.get(n))},
        "body": body,
        "body_encoding": encoding,
    }
    if ex.hops:
        data["redirected_from"] = [red.text(h) for h in ex.hops]
    if ex.body_error:
        data["body_error"] = ex.body_error
    evidence = [
        Evidence(
            "http_response",
            red.text(f"{ex.method} {ex.url}"),
            None if ex.truncated else hashlib.sha256(raw).hexdigest(),
            {"status": ex.status},
        )
    ]
    found = _response_id(opts, ex, body)
    if found is not None:
        evidence.append(found)
    ok = _is_success(ex.status, opts.success_status)
    writes = plan.method not in SAFE_METHODS
    summary = f"{plan.method} {red.text(str(plan.url).partition('?')[0])} -> {ex.status}"
    return AdapterOutcome(
        Outcome.SUCCEEDED if ok else Outcome.FAILED,
        data=data,
        side_effect=Effect(writes, writes and ok, summary),
        evidence=tuple(evidence),
        error=None if ok else red.error(status_error(plan, ex, opts.success_status)),
        truncated=ex.truncated,
    )


def cancelled_outcome(when: str) -> AdapterOutcome:
    """Cancelled where nothing can have changed (``when`` says where)."""
    return AdapterOutcome(
        Outcome.CANCELLED,
        error=ExecutionError(f"the call was cancelled {when}", code="cancelled", retryable=True),
        side_effect=Effect(False, False, f"cancelled {when}; nothing changed"),
    )


def parse_statuses(text: str | None) -> frozenset[str]:
    """A probe's ``status``: ``200``, ``200,204`` or ``2xx`` (the default)."""
    parts = frozenset(p.strip().lower() for p in (text or "2xx").split(",") if p.strip())
    bad = sorted(p for p in parts if not re.fullmatch(r"[1-5](\d\d|xx)", p))
    if bad or not parts:
        raise ValueError(f"status {text!r} is not like 200, 200,204 or 2xx")
    return parts


def probe_value(ex: Exchange, params: Mapping[str, str]) -> JSON:
    """Found → True, the header or the JSON value; 404/410 → None; anything else raises."""
    try:
        wanted = parse_statuses(params.get("status"))
        path = parse_json_path(params["json_path"]) if "json_path" in params else None
    except ValueError as exc:
        raise ExecutionError(f"probe http_get: {exc}", code="invalid_probe") from exc
    if str(ex.status) not in wanted and f"{ex.status // 100}xx" not in wanted:
        if ex.status in (404, 410):
            return None
        raise ExecutionError(
            f"probe GET {ex.url.with_query(None)} answered {ex.status}; "
            "the state could not be read",
            code="probe_unreadable",
            retryable=True,
        )
    if params.get("header"):
        return ex.headers.get(params["header"])
    if path is None:
        return True
    if ex.truncated:
        raise ExecutionError(
            "the probe's response is larger than the output budget", code="probe_unreadable"
        )
    try:
        return lookup({"$": json.loads(ex.body)}, ("$", *path))
    except (ValueError, TemplateError):
        return None
