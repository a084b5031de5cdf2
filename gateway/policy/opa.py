"""The OPA server backend (``policy_backend: opa``): decisions asked of an Open Policy Agent.

Each decision is ``POST {opa_url}/v1/data/toolgate/decision?provenance=true`` with the whole
policy input as ``input``, on one ``aiohttp`` session opened with the gateway: the gateway
gives each decision ``opa_timeout`` (default 250 ms), retries nothing, and **follows no
redirect**: the input (actor, arguments, paths) goes to ``opa_url`` and nowhere else, and a
3xx is an answer like any other that is not 200. (``opa-python-client`` cannot be told not
to follow one, and takes any status below 400 with a JSON body for OPA's answer.)

Fail closed, like the embedded backend, in two ways:

- OPA gave no decision (a timeout, a connection error, any status but 200, a body that is not
  a JSON object): ``decide`` raises ``PolicyUnavailable``, a retryable refusal whose message
  names no internals; nothing runs. ``FAILURES[<kind>]`` counts it and one warning logs
  the cause (``policy decision refused (<kind>): <cause>``).
- OPA answered, but no usable decision: an undefined ``result`` (no ``result`` key: OPA's
  answer for an undefined document) or a malformed decision deny the call with ``policy
  error: OPA ...`` as its only reason (the policy is wrong: a retry gets the same), counted
  and logged alike (``policy decision denied (<kind>)``).

OPA's ``decision_id`` (present when OPA logs decisions) is kept on the Decision, and the
``policy.decided`` event records it, so the gateway's record and OPA's decision log join.

Readiness (``available``, for ``/readyz``): OPA answers if it answered anything (a decision,
a listing, a health probe) within the last ``PROBE_INTERVAL`` (1 s), known without asking;
else ``GET {opa_url}/health`` decides (no redirect, ``opa_timeout``), asked at most once a
``PROBE_INTERVAL`` and once for all who ask meanwhile. Calls keep it known for free; an idle
gateway probes once per readiness check at most, a second apart. A decision OPA fails on
(an evaluation error for one odd input, answered 500) does not by itself take the gateway out
of rotation while OPA's health passes; an OPA that is down, hung or unreachable does, at the
first readiness check a second after its last answer.

Listing (``listed``, for MCP tools/list): ``POST {opa_url}/v1/data/toolgate/listed`` per tool,
``LISTING_REQUESTS`` at a time, never cached, all by one deadline (``opa_timeout`` from the
start of the listing: a listing of any number of tools waits one timeout at most, and a tool
not answered by then is not listed). Whether the rule exists is read from the gateway's own
sources (OPA's undefined answer cannot tell "no such rule" from "no value"); any failure or
non-boolean answer is not listed, returned with its cause for the caller to log once, not
counted in FAILURES (those are decisions).

Decision cache: the same rules as the embedded backend's (``gateway.policy.reads``: keyed on
the projection of the input onto what the modules can read, no cache when that cannot be
bounded), scanned over the gateway's own sources (``rego/`` and ``policies/``), and used only
while OPA runs exactly those: ``provenance`` names the revision of each bundle OPA has
activated, and a decision is cached only when one of them is the revision of the gateway's
own sources (``bundle.source_revision``: what ``toolgate policy bundle`` and
``GET /v1/policy/bundle`` carry). An answer with another revision empties the cache; a cached
decision is kept ``opa_cache_ttl`` at most, which bounds how long a new bundle on OPA can go
unnoticed by a key that is never missed.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from gateway import jsontext
from gateway.errors import ConfigError, PolicyUnavailable
from gateway.policy.bundle import source_revision
from gateway.policy.cache import DecisionCache
from gateway.policy.embedded import (
    CACHE_SIZE,
    UNDEFINED,
    _copy,
    _input_reads,
    json_problem,
    parse_decision,
    parse_listing,
    policy_error,
)
from gateway.policy.loader import LISTING_RULE, PolicySources, defines, new_engine
from gateway.policy.reads import Tree, path_tree, project
from gateway.types import JSON, Decision, Listing

log = logging.getLogger("toolgate.policy.opa")

PACKAGE, RULE, LISTING = "toolgate", "decision", "listed"
LISTING_REQUESTS = 8
"""At most this many requests of one listing at a time: a listing of many tools takes a bounded
share of the connections every call's decision needs."""
FAILURES: collections.Counter[str] = collections.Counter()
"""Decisions the OPA backend refused or denied because OPA gave no usable answer, by kind:
``timeout``, ``connection``, ``status`` (not 200), ``not_json`` (refused: PolicyUnavailable),
``undefined``, ``malformed`` (denied). Process-wide, for a metrics exporter to read."""
UNAVAILABLE = frozenset({"timeout", "connection", "status", "not_json"})
"""The kinds of failure where OPA gave no decision at all: a refusal a retry may pass."""
PROBE_INTERVAL = 1.0
"""How long an answer of OPA's counts as "OPA answers" for ``available`` (``/readyz``), and the
least time between two of its health probes."""
_JSON_BODY = {"Content-Type": "application/json"}


def parse_url(url: str) -> tuple[str, int, bool]:
    """(host, port, https) of ``opa_url``; ConfigError for anything else."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a bracket left open: http://[::1
        raise ConfigError(f"opa_url {url!r}: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"opa_url {url!r}: use http://host:port or https://host:port")
    if parts.path not in ("", "/") or parts.query:
        raise ConfigError(f"opa_url {url!r}: OPA's API is at the root; give no path")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 8181)
    except ValueError as exc:
        raise ConfigError(f"opa_url {url!r}: {exc}") from exc
    return parts.hostname, port, parts.scheme == "https"


class OpaPolicy:
    """The PolicyBackend that asks an OPA server (see the module docstring)."""

    def __init__(
        self,
        sources: PolicySources,
        url: str,
        *,
        timeout: float = 0.25,
        cache_ttl: float = 10.0,
        cache_size: int = CACHE_SIZE,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.sources = sources
        self.url = url
        self._host, self._port, self._https = parse_url(url)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._base = f"{'https' if self._https else 'http'}://{host}:{self._port}"
        """Where every request goes (opa_url with its port): nowhere else, no redirect."""
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._session: Any = None
        self._answered_at = self._probed_at = -math.inf
        """When OPA last answered (a decision, a listing or a health probe), and when it was
        last probed, on the event loop's clock: what ``available`` knows."""
        self._probing = asyncio.Lock()
        self._closed = False
        self.revision = source_revision(sources)
        """The revision of the gateway's own sources: the cache is used while OPA runs it."""
        self._tree: Tree | None = None
        self._cache: DecisionCache | None = None
        self.cache_refusal: str | None = "the cache is disabled (cache_size=0)"
        engine = new_engine(sources.modules, sources.data_json())
        self.lists = defines(engine, LISTING_RULE)
        """Whether the gateway's own sources define the listing rule (else ``listed`` is None)."""
        if cache_size > 0:
            reads = _input_reads(engine)
            self.cache_refusal = reads.refusal
            if reads.refusal is None:
                self._tree = path_tree(reads.paths)
                self._cache = DecisionCache(cache_size, cache_ttl)
        self.opa_revisions: dict[str, str] = {}
        """The bundle revisions OPA reported with its last answer (``provenance.bundles``)."""

    async def open(self) -> None:
        """Open the HTTP session (on the event loop that will use it)."""
        import aiohttp

        from gateway.adapters.shared.client import system_trust

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=system_trust() if self._https else True),
            headers=self._headers or None,
            timeout=aiohttp.ClientTimeout(total=None),  # each request has its own deadline
            trust_env=False,  # no proxy from the environment: the input goes to opa_url only
        )

    async def available(self) -> bool:
        """Whether OPA answers (``/readyz``): yes at once when it answered anything within
        ``PROBE_INTERVAL``; else a health probe decides, at most one a ``PROBE_INTERVAL``,
        shared by whoever asks while it runs (see the module docstring)."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._answered_at < PROBE_INTERVAL:
            return True
        async with self._probing:
            if loop.time() - self._probed_at >= PROBE_INTERVAL:
                self._probed_at = loop.time()
                if await self._healthy(self._probed_at + self._timeout):
                    self._answered_at = loop.time()
            return loop.time() - self._answered_at < PROBE_INTERVAL

    async def _healthy(self, deadline: float) -> bool:
        """``GET {opa_url}/health`` answered 200 by ``deadline``, without a redirect."""
        import aiohttp

        if self._closed or self._session is None:
            return False
        try:
            async with asyncio.timeout_at(deadline):
                async with self._session.get(
                    f"{self._base}/health", allow_redirects=False
                ) as response:
                    healthy = response.status == 200
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.info("OPA health probe failed: %s", _described(exc, self.url))
            return False
        if not healthy:
            log.info("OPA health probe failed: HTTP %s", response.status)
        return healthy

    async def decide(self, document: Mapping[str, JSON]) -> Decision:
        """Ask OPA for the decision on ``document``: PolicyUnavailable when OPA gives none;
        deny on any other fault."""
        if self._closed or self._session is None:
            return policy_error("the policy backend is closed")
        if (problem := json_problem(document)) is not None:
            return policy_error(f"the input document is not JSON: {problem}")
        key = None if self._tree is None else jsontext.strict(project(document, self._tree))
        cache = self._cache
        if cache is not None and key is not None and (hit := cache.get(key)) is not None:
            return _copy(hit)
        decision, cacheable = await self._ask(document)
        if cache is None or key is None:
            return decision
        if not cacheable:
            cache.clear()
            return decision
        cache.put(key, _copy(decision))  # a copy without decision_id: OPA made only this one
        return decision

    async def listed(self, documents: Sequence[Mapping[str, JSON]]) -> list[Listing] | None:
        """OPA's value of ``data.toolgate.listed`` for each listing input document, asked
        ``LISTING_REQUESTS`` at a time, all by one deadline (``opa_timeout`` from now); None when
        the gateway's own sources do not define the rule (what OPA runs is not known before it
        answers, and an undefined answer cannot tell "no such rule" from "no value"). Never
        cached, never counted in FAILURES, never logged: the caller logs once per listing."""
        if not self.lists:
            return None
        deadline = asyncio.get_running_loop().time() + self._timeout
        gate = asyncio.Semaphore(LISTING_REQUESTS)
        return await asyncio.gather(*(self._listed(d, deadline, gate) for d in documents))

    async def _listed(
        self, document: Mapping[str, JSON], deadline: float, gate: asyncio.Semaphore
    ) -> Listing:
        if (problem := json_problem(document)) is not None:
            return Listing(False, f"the input document is not JSON: {problem}")
        # Waiting for the gate needs no deadline of its own: whoever holds it is done by then.
        async with gate:
            if self._closed or self._session is None:
                return Listing(False, "the policy backend is closed")
            if asyncio.get_running_loop().time() >= deadline:
                return Listing(False, self._late)
            body, failure = await self._query(LISTING, document, deadline)
        if body is None:
            return Listing(False, failure[1])
        if "result" not in body:
            return Listing(False, f"OPA: {PACKAGE}.{LISTING} is undefined")
        return parse_listing(body["result"])

    async def _query(
        self, rule: str, document: Mapping[str, JSON], deadline: float
    ) -> tuple[dict[str, Any] | None, tuple[str, str]]:
        """OPA's answer for ``data.toolgate.<rule>`` as a JSON object by ``deadline`` (the
        event loop's clock), or None and the failure (its FAILURES kind, its cause). Whether
        OPA answered is kept for ``available``."""
        body, failure = await self._post(rule, document, deadline)
        if body is not None:
            self._answered_at = asyncio.get_running_loop().time()
        return body, failure

    async def _post(
        self, rule: str, document: Mapping[str, JSON], deadline: float
    ) -> tuple[dict[str, Any] | None, tuple[str, str]]:
        import aiohttp

        url = f"{self._base}/v1/data/{PACKAGE}/{rule}?provenance=true"
        payload = jsontext.strict({"input": dict(document)}).encode("utf-8")
        try:
            async with asyncio.timeout_at(deadline):
                async with self._session.post(
                    url, data=payload, headers=_JSON_BODY, allow_redirects=False
                ) as response:
                    if response.status != 200:
                        return None, ("status", _status(response))
                    if response.content_type != "application/json":
                        kind = response.headers.get("Content-Type", "no content type")
                        return None, ("not_json", f"OPA answered 200 with {kind}, not JSON")
                    raw = await response.read()
        except TimeoutError:
            return None, ("timeout", self._late)
        except aiohttp.ClientError as exc:
            return None, ("connection", _described(exc, self.url))
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return None, ("not_json", f"OPA's answer is not JSON: {exc}")
        if not isinstance(body, dict):
            return None, ("not_json", "OPA's answer is not a JSON object")
        return body, ("", "")

    async def _ask(self, document: Mapping[str, JSON]) -> tuple[Decision, bool]:
        """OPA's decision, and whether it was made by the gateway's own revision."""
        deadline = asyncio.get_running_loop().time() + self._timeout
        body, failure = await self._query(RULE, document, deadline)
        if body is None:
            _count(*failure, "refused")
            raise PolicyUnavailable(failure[0])
        self.opa_revisions = _revisions(body)
        if "result" not in body:
            return _failed("undefined", f"OPA: {PACKAGE}.{RULE} is undefined"), False
        decision = parse_decision(body["result"] if body["result"] != UNDEFINED else None)
        if decision.reasons[:1] and decision.reasons[0].startswith("policy error: "):
            cause = decision.reasons[0].removeprefix("policy error: ")
            return _failed("malformed", f"OPA's decision is malformed: {cause}"), False
        decision_id = body.get("decision_id")
        if isinstance(decision_id, str) and decision_id:
            decision = Decision(decision.result, decision.reasons, decision.extra, decision_id)
        return decision, self.revision in self.opa_revisions.values()

    @property
    def _late(self) -> str:
        return f"OPA did not answer within {round(self._timeout * 1000)} ms"

    async def aclose(self) -> None:
        """Refuse further decisions and close the HTTP session."""
        self._closed = True
        if self._cache is not None:
            self._cache.clear()
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _failed(kind: str, cause: str) -> Decision:
    _count(kind, cause, "denied")
    return policy_error(cause)


def _count(kind: str, cause: str, what: str) -> None:
    FAILURES[kind] += 1
    log.warning("policy decision %s (%s): %s", what, kind, cause)


def _status(response: Any) -> str:
    """The cause of an answer other than 200; a redirect says where it pointed (not followed:
    the policy input goes to opa_url only)."""
    cause = f"OPA answered HTTP {response.status} {response.reason or ''}".rstrip()
    if 300 <= response.status < 400:
        cause += f" (a redirect to {response.headers.get('Location', 'nowhere')!r}, not followed)"
    return cause


def _described(exc: BaseException, url: str) -> str:
    """A transport failure, for the log (never for the agent)."""
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"cannot reach OPA at {url}: {exc}"


def _revisions(body: Mapping[str, Any]) -> dict[str, str]:
    bundles = (body.get("provenance") or {}).get("bundles") or {}
    if not isinstance(bundles, dict):
        return {}
    return {
        str(name): str(info["revision"])
        for name, info in bundles.items()
        if isinstance(info, dict) and isinstance(info.get("revision"), str)
    }
