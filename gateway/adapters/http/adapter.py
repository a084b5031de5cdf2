"""The HTTP adapter: one declared request per tool, sent behind egress control.

A tool declares its method, URL, query, headers, body, credentials and egress allowlist
(``gateway.adapters.http.options``; every key in ``docs/adapters/http.md``); the request is
filled from the call context (``request``), sent here, and read back into an outcome
(``results``). The client (``shared.client``, aiohttp) connects only through
``gateway.adapters.shared.egress``: the host is checked here per request and per redirect
hop, the resolved address at every connect.

Failures are translated at this edge, and whether anything left decides how:

    never sent (refused, DNS, connect, cancelled early) → failed, retryable if it may help
    sent, no response: the deadline             → ``timeout``
    sent, no response: connection lost          → ``interrupted``   (reason response_lost)
    sent, no response: cancelled in flight      → ``cancelled``     (reason cancelled_in_flight)
    a response                                  → by status (results.status_error)

The pipeline reconciles the three uncertain codes of a write with the tool's ``reconcile``
probes and otherwise reports ``unknown``; ``retryable`` is true for them only when a repeat
cannot duplicate the effect. Nothing is retried here; the client sends a request again
only where a kept-alive connection was closed under it and repeating is safe
(``shared.client``).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, TypeVar

import anyio
from pydantic import ValidationError as PydanticValidationError

from gateway.adapters.base import AdapterCall, AdapterOutcome
from gateway.adapters.http.options import HttpConfig, HttpOptions, parse_json_path
from gateway.adapters.http.request import (
    REDACTED,
    Redactor,
    check_header_values,
    credential_headers,
    join_url,
    render_body,
    render_pairs,
    render_url,
)
from gateway.adapters.http.results import (
    IDEMPOTENT_METHODS,
    SAFE_METHODS,
    Exchange,
    Plan,
    cancelled_outcome,
    outcome_of,
    parse_statuses,
    probe_value,
)
from gateway.adapters.shared.client import (
    Attempt,
    Client,
    Lost,
    Unreachable,
    read_body,
    ssl_context,
)
from gateway.adapters.shared.egress import (
    EgressPolicy,
    EgressRefused,
    IPNetwork,
    check_host,
)
from gateway.adapters.shared.urls import URL, parse_url
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.model import ToolDeclaration
from gateway.declarations.templates import TemplateError
from gateway.errors import ConfigError, ExecutionError, ToolgateError
from gateway.settings import Settings
from gateway.types import JSON
from gateway.yamlsrc import Lines

T = TypeVar("T")

RESPONSE_LOST = "interrupted"
"""The code of "sent, and the connection died before the response": one the pipeline
reconciles (like ``timeout``), with ``reason: response_lost`` in the error."""
_MARGIN = 0.05  # seconds kept back so this adapter's own timeout fires before the pipeline's
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_PROBE_PARAMS = frozenset({"url", "status", "json_path", "header"})
PROBE_FLOOR = 5.0
"""Seconds a probe may always take (capped by the tool's timeout): reconcile probes run
after the call's own deadline has passed."""


def create(settings: Settings, config: Mapping[str, Any], catalogue: Catalogue) -> HttpAdapter:
    """Check ``adapters.http`` and open the adapter; ConfigError names every bad key."""
    try:
        parsed = HttpConfig.model_validate(dict(config))
    except PydanticValidationError as exc:
        raise ConfigError(
            [
                f"adapters.http.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
                for err in exc.errors()
            ]
        ) from exc
    secrets_dir = settings.path(parsed.secrets_dir) if parsed.secrets_dir else None
    ca_bundle = settings.path(parsed.ca_bundle) if parsed.ca_bundle else None
    if ca_bundle is not None and not ca_bundle.is_file():
        raise ConfigError(f"adapters.http.ca_bundle: {ca_bundle} is not a file")
    if ca_bundle is not None:
        try:  # every call would fail on it: refuse it now
            ssl_context(ca_bundle)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"adapters.http.ca_bundle: {ca_bundle} is not PEM certificates ({exc.reason})"
            ) from exc
    problems = check_declarations(catalogue, parsed)
    if problems:
        raise ConfigError(problems)
    return HttpAdapter(
        parsed.model_copy(update={"secrets_dir": secrets_dir, "ca_bundle": ca_bundle})
    )


def check_declarations(catalogue: Catalogue, config: HttpConfig) -> list[str]:
    """What the loader cannot see in the http tools of ``catalogue``: a ``service`` that
    ``adapters.http.services`` does not declare, bad ``http_get`` probe parameters.
    Any of them fails the start, naming file, line and key."""
    problems: list[str] = []
    known = ", ".join(sorted(config.services)) or "none"
    for tool in catalogue.all():
        if not isinstance(tool.options, HttpOptions):
            continue
        lines = catalogue.lines(tool)
        service = tool.options.service
        if service is not None and service not in config.services:
            problems.append(
                f"{lines.where(('service',))}: service {service!r} is not declared "
                f"in adapters.http.services of the gateway configuration (declared: {known})"
            )
        problems.extend(_probe_problems(tool, lines))
    return problems


def _probe_problems(tool: ToolDeclaration, lines: Lines) -> Iterator[str]:
    """Probe parameters the loader cannot check: unknown names, a bad status or path."""
    probes = [
        (f, i, p.probe, p.params)
        for f in ("verify", "reconcile")
        for i, p in enumerate(getattr(tool, f))
    ]
    probes += [("state_guards", i, g.actual, g.params) for i, g in enumerate(tool.state_guards)]
    for field, i, name, params in probes:
        if name != "http_get":
            continue
        for key, template in params.items():
            where = lines.where((field, i, key))
            if key not in _PROBE_PARAMS and not key.startswith("query."):
                yield f"{where}: probe http_get has no parameter {key!r}"
            elif key in ("status", "json_path") and not template.references:
                try:
                    (parse_statuses if key == "status" else parse_json_path)(template.source)
                except ValueError as exc:
                    yield f"{where}: {exc}"


def _redirect_target(url: URL, location: str) -> URL:
    """Where a redirect from ``url`` points; a Location that is not a URL is refused like
    any other hop egress control does not allow (``check_host`` checks the rest)."""
    try:
        return url.join(parse_url(location))
    except ValueError as exc:
        shown = location[:100]
        raise EgressRefused(
            f"the redirect from {url.with_query(None)} points to {shown!r}, "
            "which is not an http(s) URL"
        ) from exc


class _StoppedSafely(Exception):
    """Cancelled where nothing can have changed: before sending, or during a safe method."""


def _options(call: AdapterCall) -> HttpOptions:
    options = call.tool.options
    if not isinstance(options, HttpOptions):
        raise ExecutionError(f"{call.tool.ref} is not an http tool", code="adapter_mismatch")
    return options


async def _run_bounded(call: AdapterCall, seconds: float, fn: Callable[[], Awaitable[T]]) -> T:
    """``fn()`` within ``seconds`` (else TimeoutError) unless ``call.cancelled`` is set first
    (then ``_Cancelled``). Errors of ``fn`` come out as they are, not in an ExceptionGroup."""
    box: dict[str, Any] = {}

    async def runner() -> None:
        try:
            with anyio.fail_after(seconds):
                box["value"] = await fn()
        except Exception as exc:
            box["error"] = exc
        finally:
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(runner)
        await call.cancelled.wait()
        tg.cancel_scope.cancel()
    if "error" in box:
        raise box["error"]
    if "value" not in box:
        raise _Cancelled
    value: T = box["value"]
    return value


class _Cancelled(Exception):
    """``call.cancelled`` was set while waiting."""


def _budget(call: AdapterCall, floor: float) -> float:
    return max(call.seconds_left() - _MARGIN, floor, 0.001)


def _os_reason(exc: BaseException) -> str:
    """A short reason for a connection that could not be made, never the raw exception text."""
    if isinstance(exc, Unreachable):
        return exc.reason
    return "the connection could not be made"


def _where(url: URL) -> str:
    return f"{url.host}:{url.port or (443 if url.scheme == 'https' else 80)}"


def _send_error(exc: Exception, plan: Plan, url: URL, sent: bool, seconds: float) -> ToolgateError:
    """A transport failure as the project's error: was anything sent, may it be retried?"""
    target = f"{plan.method} {url.with_query(None)}"
    if not isinstance(exc, Lost | Unreachable | TimeoutError):
        return ExecutionError(
            f"{target} could not be sent: invalid request", code="invalid_request"
        )
    if not sent or isinstance(exc, Unreachable):
        if isinstance(exc, TimeoutError):
            why = f"no connection to {_where(url)} within {seconds:.1f} s"
        else:
            why = f"could not connect to {_where(url)}: {_os_reason(exc)}"
        return ExecutionError(f"{why}; nothing was sent", code="http_unreachable", retryable=True)
    if isinstance(exc, TimeoutError):
        return ExecutionError(
            f"{target} got no response within {seconds:.1f} s; the server may have processed it",
            code="timeout",
            retryable=plan.retry_safe,
        )
    return ExecutionError(
        f"the connection for {target} was lost before a response arrived; "
        "the server may have processed it",
        code=RESPONSE_LOST,
        retryable=plan.retry_safe,
        details={"reason": "response_lost"},
    )


def _unfilled(tool: ToolDeclaration, exc: TemplateError) -> ExecutionError:
    return ExecutionError(
        f"the declaration of {tool.ref} could not be filled in: {exc}", code="template_error"
    )


def _target(base: str | None, url_text: str, query: Sequence[tuple[str, str]]) -> URL:
    """The URL a request goes to: the rendered ``url`` on the tool's base, plus ``query``
    (a name the URL already has takes the query's values instead)."""
    url = join_url(base, url_text)
    return url.update_query(query) if query else url


class HttpAdapter:
    """Declared HTTP requests through per-policy connection pools."""

    name: ClassVar[str] = "http"

    def __init__(self, config: HttpConfig) -> None:
        self.config = config
        self._client: Client | None = None  # made on the first request (its SSL context ~50 ms)
        self._policies: dict[tuple[Any, ...], EgressPolicy] = {}

    async def execute(self, call: AdapterCall) -> AdapterOutcome:
        if call.cancelled.is_set():
            return cancelled_outcome("before the request was sent")
        opts = _options(call)
        plan = await self._plan_request(call, opts)
        try:
            exchange = await self._send(plan, call)
        except _StoppedSafely as stop:
            return cancelled_outcome(str(stop))
        except ToolgateError as exc:
            plan.redactor.error(exc)
            raise
        return plan.redactor.outcome(outcome_of(plan, exchange, opts))

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        """``http_get``: GET ``url``; the status, a header or a JSON value (docs: probes)."""
        if name != "http_get":
            raise ExecutionError(f"the http adapter has no probe {name!r}", code="unknown_probe")
        unknown = {k for k in params if k not in _PROBE_PARAMS and not k.startswith("query.")}
        if unknown:
            raise ExecutionError(
                f"probe http_get has no parameters {sorted(unknown)}", code="invalid_probe"
            )
        opts = _options(call)
        query = [(k.removeprefix("query."), v) for k, v in params.items() if k.startswith("query.")]
        floor = min(PROBE_FLOOR, call.tool.timeout)
        plan = await self._plan(call, opts, "GET", params["url"], query=query, floor=floor)
        try:
            exchange = await self._send(plan, call)
        except _StoppedSafely as exc:
            raise ExecutionError("the probe was cancelled", code="cancelled") from exc
        except ToolgateError as exc:
            plan.redactor.error(exc)
            raise
        return plan.redactor.json(probe_value(exchange, params))

    async def preview(self, call: AdapterCall) -> JSON:
        """The request it would send: method, URL and headers, every credential and secret
        redacted; the body only by its size. Nothing is sent."""
        plan = await self._plan_request(call, _options(call))
        redact = plan.redactor.text
        headers = [
            [name, REDACTED if name.lower() in plan.credential_headers else redact(value)]
            for name, value in plan.headers
        ]
        return {
            "method": plan.method,
            "url": redact(str(plan.url)),
            "headers": headers,
            "body_bytes": len(plan.content or b""),
        }

    def policy_view(self, tool: ToolDeclaration, context: Mapping[str, JSON]) -> dict[str, JSON]:
        """The request as the policy sees it (``input.action``): method, scheme, host, port,
        path and the query's keys, rendered as ``execute`` renders them; never a header, a
        credential, a query value or the body. Nothing is read or sent."""
        opts = tool.options
        assert isinstance(opts, HttpOptions)
        try:
            url_text = render_url(opts.url, context)
            query = render_pairs(opts.query, context)
        except TemplateError as exc:
            raise _unfilled(tool, exc) from exc
        url = _target(self._upstream(opts)[0], url_text, query)
        return {
            "method": opts.method,
            "scheme": url.scheme,
            "host": url.host,
            "port": url.port or (443 if url.scheme == "https" else 80),
            "path": url.path,
            "query_keys": sorted(set(url.query.keys())),
        }

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- planning --------------------------------------------------------------------

    async def _plan_request(self, call: AdapterCall, opts: HttpOptions) -> Plan:
        ctx = call.context
        key = str((ctx.get("request") or {}).get("idempotency_key") or "")
        idem = opts.idempotency_header if key else None
        try:
            url = render_url(opts.url, ctx)
            query = render_pairs(opts.query, ctx)
            headers = render_pairs(opts.headers, ctx)
            content, ctype = render_body(opts.body, ctx)
            if idem is not None:
                headers.append((idem.name, idem.value.render(ctx)))
        except TemplateError as exc:
            raise _unfilled(call.tool, exc) from exc
        if ctype and not any(n.lower() == "content-type" for n, _ in headers):
            headers.append(("Content-Type", ctype))
        return await self._plan(
            call,
            opts,
            opts.method,
            url,
            query=query,
            headers=headers,
            content=content,
            redirects=opts.redirects,
            keyed=idem is not None,
        )

    async def _plan(
        self,
        call: AdapterCall,
        opts: HttpOptions,
        method: str,
        url_text: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        headers: Sequence[tuple[str, str]] = (),
        content: bytes | None = None,
        redirects: int = 0,
        keyed: bool = False,
        floor: float = 0.0,
    ) -> Plan:
        """Everything but the sending: URL, egress policy, credentials, trace context."""
        base, networks = self._upstream(opts)
        url = _target(base, url_text, query)
        policy = self._policy(opts, base, networks)
        secrets, credentials = await credential_headers(opts.credentials, self.config.secrets_dir)
        all_headers = [*headers, *credentials]
        if call.traceparent:
            all_headers.append(("traceparent", call.traceparent))
        check_header_values(all_headers)
        return Plan(
            method=method,
            url=url,
            headers=tuple(all_headers),
            content=content,
            policy=policy,
            redactor=Redactor(secrets),
            credential_headers=frozenset(c.header.lower() for c in opts.credentials),
            redirects=redirects,
            retry_safe=method in IDEMPOTENT_METHODS or keyed,
            budget=call.output_budget,
            floor=floor,
        )

    def _policy(
        self, opts: HttpOptions, base: str | None, networks: tuple[IPNetwork, ...]
    ) -> EgressPolicy:
        """The egress policy of a declaration with its service's base and networks: built
        once for each (their hosts and networks parsed), not on every call (issue 33)."""
        key = (opts.egress, opts.implied_hosts, base, networks)
        policy = self._policies.get(key)
        if policy is None:
            hosts = (*opts.egress.allow_hosts, *opts.implied_hosts)
            policy = EgressPolicy.build(
                (*hosts, *([parse_url(base).host or ""] if base else [])),
                (*opts.egress.allow_networks, *networks),
            )
            self._policies[key] = policy
        return policy

    def _upstream(self, opts: HttpOptions) -> tuple[str | None, tuple[IPNetwork, ...]]:
        """The base URL and the extra allowed networks of the tool's service."""
        if opts.service is None:
            return opts.base_url, ()
        service = self.config.services.get(opts.service)
        if service is None:
            known = ", ".join(sorted(self.config.services)) or "none"
            raise ExecutionError(
                f"service {opts.service!r} is not configured under adapters.http.services "
                f"(configured: {known})",
                code="http_service_unknown",
            )
        return service.base_url, service.allow_networks

    # -- sending ---------------------------------------------------------------------

    def _open(self) -> Client:
        if self._client is None:
            self._client = Client(
                ssl_context=ssl_context(self.config.ca_bundle),
                limit=self.config.max_connections,
                user_agent=self.config.user_agent,
            )
        return self._client

    async def _send(self, plan: Plan, call: AdapterCall) -> Exchange:
        """Send, following at most ``plan.redirects`` redirects, each hop checked again."""
        method, url, headers, content = plan.method, plan.url, list(plan.headers), plan.content
        hops: list[str] = []
        while True:
            check_host(url, plan.policy)
            exchange = await self._exchange(plan, call, method, url, headers, content)
            location = exchange.headers.get("location")
            if exchange.status not in _REDIRECTS or not location or len(hops) >= plan.redirects:
                return replace(exchange, hops=tuple(hops))
            hops.append(str(url))
            target = _redirect_target(url, location)
            if exchange.status == 303 or (exchange.status in (301, 302) and method == "POST"):
                method = "GET" if method != "HEAD" else method
                content = None
                headers = [(n, v) for n, v in headers if n.lower() != "content-type"]
            if (target.scheme, target.host, target.port) != (url.scheme, url.host, url.port):
                headers = [(n, v) for n, v in headers if n.lower() not in plan.credential_headers]
            url = target

    async def _exchange(
        self,
        plan: Plan,
        call: AdapterCall,
        method: str,
        url: URL,
        headers: list[tuple[str, str]],
        content: bytes | None,
    ) -> Exchange:
        """One request and its body within the call's budget; whatever stops it (an error,
        the deadline, a cancellation) is judged by how far it got (``Attempt``)."""
        attempt = Attempt(retry_safe=plan.retry_safe)
        seconds = _budget(call, plan.floor)
        client, networks = self._open(), plan.policy.networks

        async def send() -> tuple[bool, str | None]:
            async with client.open(attempt, networks, method, url, headers, content) as answer:
                return await read_body(answer, plan.budget, attempt.body)

        try:
            truncated, problem = await _run_bounded(call, seconds, send)
        except (TimeoutError, _Cancelled) as exc:
            if attempt.status is None:
                raise self._stopped(exc, plan, method, url, attempt.sent, seconds) from exc
            truncated, problem = True, "the deadline or a cancellation cut the body short"
        except ToolgateError:
            raise
        except Exception as exc:
            raise _send_error(exc, plan, url, attempt.sent, seconds) from exc
        assert attempt.status is not None
        return Exchange(
            method, url, attempt.status, attempt.headers, bytes(attempt.body), truncated, problem
        )

    @staticmethod
    def _stopped(
        exc: Exception, plan: Plan, method: str, url: URL, sent: bool, seconds: float
    ) -> Exception:
        """The deadline or a cancellation before the response: safe, or uncertain."""
        if isinstance(exc, TimeoutError):
            return _send_error(exc, plan, url, sent, seconds)
        if not sent:
            return _StoppedSafely("before the request was sent")
        if method in SAFE_METHODS:
            return _StoppedSafely(f"while waiting for the response to {method}")
        return ExecutionError(
            f"cancelled after {method} {url.with_query(None)} was sent; "
            "the server may have processed it",
            code="cancelled",
            retryable=plan.retry_safe,
            details={"reason": "cancelled_in_flight"},
        )
