"""Gateway settings: ``toolgate.yaml`` (or ``$TOOLGATE_CONFIG``) plus ``TOOLGATE_*`` overrides.

Parsed once at the edge into a frozen model that forbids unknown keys. Relative paths in
the file are relative to the file's directory.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError

from gateway.errors import ConfigError
from gateway.jsonlimits import JsonLimits
from gateway.units import parse_duration, parse_duration_or_zero, parse_size
from gateway.yamlsrc import Lines, load_yaml, pydantic_problems

Duration = Annotated[float, BeforeValidator(parse_duration)]
DurationOrZero = Annotated[float, BeforeValidator(parse_duration_or_zero)]
"""A duration where 0 is meaningful (never, no skew, no wait)."""
Size = Annotated[int, BeforeValidator(parse_size)]


def _no_nul(value: Any) -> Any:
    """A path holds no NUL byte: no system call takes one (``os`` raises ValueError)."""
    if "\x00" in str(value):
        raise ValueError("a path cannot hold a NUL byte")
    return value


ConfPath = Annotated[Path, AfterValidator(_no_nul)]
"""A path of the configuration."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


KeyId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.@:-]+$")]


def _midnight(value: object) -> object:
    """A YAML date is its midnight UTC."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.UTC)
    return value


def _aware(value: datetime.datetime) -> datetime.datetime:
    """A timestamp without a time zone is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


Instant = Annotated[datetime.datetime, BeforeValidator(_midnight), AfterValidator(_aware)]


class ApiKey(_Frozen):
    """One API key of a principal (docs/security.md#identities): only its sha256 is stored.
    A principal may hold several, so that a key is replaced without a gap."""

    id: KeyId
    """The key's own name: what ``toolgate keys revoke`` names and the logs show."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    expires: Instant | None = None
    """After this instant the key is refused (an ISO 8601 time; a date is midnight UTC)."""
    label: str = ""

    @property
    def expires_ms(self) -> int | None:
        return None if self.expires is None else int(self.expires.timestamp() * 1000)


class Principal(_Frozen):
    """An API key holder: one key (``key_sha256``) or several (``keys``)."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.@-]+$")
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """A single key, whose key id is the principal's id (the short form of ``keys``)."""
    keys: tuple[ApiKey, ...] = ()
    label: str = ""

    @model_validator(mode="after")
    def _has_a_key(self) -> Principal:
        if self.key_sha256 is None and not self.keys:
            raise ValueError(f"principal {self.id} has no key: give key_sha256 or keys")
        return self

    @property
    def all_keys(self) -> tuple[ApiKey, ...]:
        """Every key of this principal, the short form's first."""
        if self.key_sha256 is None:
            return self.keys
        return (ApiKey(id=self.id, sha256=self.key_sha256), *self.keys)


ClaimPath = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^.\s]+(\.[^.\s]+)*$")]
Algorithm = Annotated[
    str,
    Field(pattern=r"^(RS256|RS384|RS512|PS256|PS384|PS512|ES256|ES384|ES512|EdDSA)$"),
]
"""Asymmetric algorithms only: never ``none``, never an HMAC (``HS*``), whose key would be
the public key anyone can read in the JWKS."""


def _http_url(value: str) -> bool:
    """``value`` is an absolute http(s) URL with a host and a valid port, if any."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a port out of range or not a number raises here)
    except ValueError:  # a bracket left open (http://[::1), a bad port
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


class JwtSettings(_Frozen):
    """Bearer JWTs from an OpenID Connect provider (docs/security.md#jwt-bearer-tokens)."""

    issuer: str = Field(min_length=1)
    """The ``iss`` every token must carry, exactly."""
    resource: str = Field(min_length=1, pattern=r"^https?://[^/?#\s]+/[^?#\s]*$")
    """This gateway's MCP endpoint as an OAuth protected resource (RFC 9728): its canonical
    URL, ``https://toolgate.example.com/mcp``. Never taken from a request's ``Host``, which the
    caller chooses."""
    audience: str | None = None
    """The ``aud`` a token must hold; unset, ``resource`` is the audience (RFC 8707)."""
    authorization_servers: tuple[str, ...] = ()
    """Issuers clients get tokens from, published in the resource metadata; unset: ``issuer``."""
    scopes_supported: tuple[str, ...] = ()
    """Scopes published in the resource metadata."""
    jwks_file: ConfPath | None = None
    """A JWKS document on disk (relative to the configuration file), re-read when it changes."""
    jwks_url: str | None = None
    """A JWKS document over HTTP(S), cached and fetched again for a key id it does not hold."""
    jwks_max_age: Duration = Field(default=600.0, gt=0)
    """Fetch the JWKS again after this long even with no unknown key id (rotation)."""
    jwks_min_refetch: Duration = Field(default=30.0, gt=0)
    """At most one fetch per this interval, however many unknown key ids arrive."""
    jwks_timeout: Duration = Field(default=3.0, gt=0, le=30)
    """The deadline of one whole JWKS fetch (connect, answer and body), not of each read."""
    algorithms: tuple[Algorithm, ...] = ("RS256", "ES256")
    """The ``alg`` values accepted (asymmetric only)."""
    leeway: DurationOrZero = Field(default=30.0, ge=0, le=300)
    """Clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
    principal_claim: ClaimPath = "sub"
    """The claim (dotted path) whose value is the principal id."""
    principal_prefix: str = ""
    """Prepended to the claim's value (``oidc:``), so token principals cannot pose as
    API-key principals."""
    roles_claim: ClaimPath | None = None
    """The claim (dotted path: ``realm_access.roles``) holding a list (or a space-separated
    string) of the identity's roles."""
    role_map: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """A claim role → the gateway roles it grants; a claim role not listed is dropped unless
    ``keep_unmapped_roles``."""
    keep_unmapped_roles: bool = False
    """Pass claim roles with no ``role_map`` entry through as they are."""

    @model_validator(mode="after")
    def _one_jwks(self) -> JwtSettings:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("give exactly one of jwks_file and jwks_url")
        if self.jwks_url is not None and not _http_url(self.jwks_url):
            raise ValueError("jwks_url must be an http(s) URL with a host")
        if not self.algorithms:
            raise ValueError("algorithms must name at least one algorithm")
        return self

    @property
    def expected_audience(self) -> str:
        return self.audience or self.resource


class MetricsSettings(_Frozen):
    """``GET /metrics`` (docs/operations.md#metrics)."""

    enabled: bool = True
    """Collect the Prometheus series; off, ``/metrics`` is 404 and calls pay nothing for them."""
    open: bool = False
    """Serve ``/metrics`` without an API key (for a scraper that has none: bind the gateway
    where only the scraper reaches it). Off, it takes the API's bearer key like any route."""


class TracingSettings(_Frozen):
    """OpenTelemetry spans (docs/operations.md#tracing); needs the ``tracing`` extra."""

    enabled: bool = False
    """Trace every execution; an ``OTEL_*`` exporter variable in the environment also turns
    it on."""


MaskPath = Annotated[str, Field(pattern=r"^/?input(/[^/]+)+$")]


class DecisionLogSettings(_Frozen):
    """The decision log, in OPA's event shape (docs/operations.md#the-decision-log)."""

    enabled: bool = False
    path: Annotated[str, AfterValidator(_no_nul)] = "-"
    """``-``: standard output; else a file (relative to the configuration file), appended to."""
    mask: tuple[MaskPath, ...] = ()
    """Input fields erased from every event, as OPA names them: ``/input/arguments/content``."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Added to every event's ``labels`` (next to ``id`` and ``version``)."""


class ShadowSettings(_Frozen):
    """A candidate policy evaluated beside the enforcing one and never enforced
    (docs/policies.md#shadow-policies): ``rego_dir`` + ``policies_dir``, or ``bundle``."""

    rego_dir: ConfPath | None = None
    policies_dir: ConfPath | None = None
    bundle: ConfPath | None = None
    """A bundle file (``toolgate policy bundle``) instead of the two directories."""
    opa_url: str | None = None
    """``policy_backend: opa``: the OPA that runs the candidate (a second OPA, serving the
    candidate's bundle); required with that backend."""
    timeout: Duration = Field(default=0.25, gt=0, le=30)
    """The time budget of one candidate decision (off the call's path); past it the
    comparison is dropped and counted (``toolgate_policy_shadow_skipped{reason="timeout"}``)."""
    queue: int = Field(default=1000, ge=1, le=1_000_000)
    """How many decisions may wait for the candidate; when full, more are dropped and counted
    (``reason="queue_full"``), never waited for."""

    @model_validator(mode="after")
    def _one_source(self) -> ShadowSettings:
        dirs = (self.rego_dir is not None, self.policies_dir is not None)
        if self.bundle is not None and any(dirs):
            raise ValueError("give either bundle or rego_dir + policies_dir, not both")
        if self.bundle is None and not all(dirs):
            raise ValueError("give rego_dir and policies_dir (both), or bundle")
        return self


NonEmpty = Annotated[str, Field(min_length=1)]


class McpSettings(_Frozen):
    """The MCP endpoint at ``/mcp`` (docs/mcp.md)."""

    allowed_hosts: tuple[NonEmpty, ...] = ("127.0.0.1:*", "localhost:*", "[::1]:*")
    """``Host`` values the endpoint answers (DNS-rebinding protection); ``name:*`` is any port."""
    allowed_origins: tuple[NonEmpty, ...] = (
        "http://127.0.0.1:*",
        "http://localhost:*",
        "http://[::1]:*",
    )
    """``Origin`` values accepted when a request carries one (a browser's)."""
    workspace: str | None = None
    """The workspace of a call that names none in ``_meta`` (``io.toolgate/workspace``)."""
    public_url: str | None = Field(default=None, pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$")
    """The gateway's URL as people and agents reach it (``https://toolgate.example.com``,
    behind a proxy): the base of the links in MCP answers (an approval's page, the
    execution). Unset: the request's own scheme and ``Host`` (one of ``allowed_hosts``)."""

    @field_validator("public_url")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        return None if value is None else value.rstrip("/")

    task_wait: DurationOrZero = Field(default=2.0, ge=0, le=60)
    """How long ``tools/call`` waits for a call before answering a task-capable client with a
    task instead of the result."""
    max_sessions_per_principal: int = Field(default=32, ge=1, le=100_000)
    """2025-11-25 sessions one principal may hold open at once, per gateway process (more:
    429 ``too_many_sessions``)."""
    max_sessions_total: int = Field(default=1000, ge=1, le=100_000)
    """2025-11-25 sessions open at once in one gateway process, for everyone (more: 503)."""
    session_idle_timeout: Duration = Field(default=1800.0, gt=0)
    """A 2025-11-25 session with no request in flight for this long is closed (its slot
    is given back)."""
    max_listings_per_principal: int = Field(default=4, ge=1, le=10_000)
    """``tools/list`` requests one principal may have asking the policy at once, per gateway
    process (more: error ``-32029``, ``too_many_listings``): each asks about every tool, and a
    slow OPA server holds them (``opa_timeout``)."""
    max_listings_total: int = Field(default=64, ge=1, le=100_000)
    """``tools/list`` requests asking the policy at once in one gateway process, for everyone
    (more: error ``-32029``, ``overloaded``)."""
    fast_calls: bool = True
    """Answer the plain ``tools/call`` requests of 2026-07-28 without the SDK's transport
    (the same answers for less CPU: gateway/mcp/stateless.py); false: the SDK answers all."""


class AuditSettings(_Frozen):
    """The audit trail's signed checkpoints (docs/security.md#audit-trail)."""

    checkpoint_interval: DurationOrZero = Field(default=60.0, ge=0)
    """How often a gateway signs a checkpoint of the event chains that moved (one replica
    does it; the others see it done and skip); 0: never by itself, only on demand
    (``toolgate audit checkpoint``)."""
    signing_key: ConfPath | None = None
    """An Ed25519 private key (PEM, PKCS #8, unencrypted) that signs checkpoints; every
    replica takes the same. Unset: one is made once in ``var/audit.key``."""
    public_keys: tuple[ConfPath, ...] = ()
    """More Ed25519 public keys (PEM files) whose checkpoints verify: a retired key's, or
    another replica's that signs with a key of its own."""


NotificationEvent = Literal[
    "approval.requested",
    "approval.approved",
    "approval.denied",
    "approval.expired",
    "approval.withdrawn",
]
NOTIFICATION_EVENTS: tuple[NotificationEvent, ...] = (
    "approval.requested",
    "approval.approved",
    "approval.denied",
    "approval.expired",
    "approval.withdrawn",
)
"""What a notification endpoint may subscribe to (docs/operations.md#approval-notifications)."""
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]
PublicUrl = Annotated[str, Field(pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$")]


def _network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(str(value).strip(), strict=True))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a network like 10.0.0.0/8 or 127.0.0.1") from exc


class NotificationEndpoint(_Frozen):
    """One receiver of approval notifications: a signed POST to ``url`` for each of
    ``events`` (docs/operations.md#approval-notifications)."""

    url: str = Field(pattern=r"^https?://[^/?#\s]+(/[^#\s]*)?$", max_length=2048)
    """Where the notification is POSTed; reached only through egress control."""
    secret_env: EnvName
    """The environment variable holding the signing secret, ``whsec_<base64>`` (Standard
    Webhooks); never the secret itself."""
    events: tuple[NotificationEvent, ...] = NOTIFICATION_EVENTS
    """The approval events sent here (all five by default)."""
    template: str | None = Field(default=None, max_length=16384)
    """A JSON body with ``$name`` placeholders (Python ``string.Template``) instead of the
    gateway's own payload: how a chat tool's incoming webhook (Slack, Teams) is reached."""
    allow_networks: tuple[Annotated[str, AfterValidator(_network)], ...] = ()
    """Networks this endpoint may reach although they are not public (egress control refuses
    loopback, private and link-local addresses otherwise), as a tool's ``allow_networks``."""


class NotificationSettings(_Frozen):
    """Approval notifications (webhooks): docs/operations.md#approval-notifications."""

    endpoints: tuple[NotificationEndpoint, ...] = ()
    concurrency: int = Field(default=4, ge=1, le=64)
    """Deliveries one gateway process sends at once."""
    timeout: Duration = Field(default=10.0, gt=0, le=60)
    """The deadline of one delivery attempt (connect, answer and body)."""
    max_response_bytes: Size = Field(default=64 * 1024, ge=0, le=1024 * 1024)
    """The most of a receiver's answer read (the rest is dropped)."""
    retry_initial: Duration = Field(default=5.0, gt=0)
    """The wait before the first retry; each next one waits twice as long..."""
    retry_max: Duration = Field(default=600.0, gt=0)
    """... up to this."""
    max_attempts: int = Field(default=12, ge=1, le=1000)
    """Attempts before a delivery is dead-lettered."""
    max_age: Duration = Field(default=24 * 3600.0, gt=0)
    """A delivery not made this long after its event is dead-lettered."""
    poll_interval: Duration = Field(default=1.0, gt=0, le=60)
    """How often the sender looks for due deliveries."""


@cache
def _json_limits(max_depth: int, max_values: int) -> JsonLimits:
    return JsonLimits(max_depth=max_depth, max_values=max_values)


class Settings(_Frozen):
    base_dir: ConfPath
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    database_url: str = "sqlite:///var/toolgate.db"
    tools_dir: ConfPath = Path("tools.d")
    rego_dir: ConfPath = Path("rego")
    policies_dir: ConfPath = Path("policies")
    var_dir: ConfPath = Path("var")
    policy_backend: str = Field(default="embedded", pattern=r"^(embedded|opa)$")
    opa_url: str = "http://127.0.0.1:8181"
    opa_timeout: Duration = Field(default=0.25, gt=0, le=30)
    """The deadline of one decision by the OPA server (``policy_backend: opa``); past it the
    call is refused, ``policy_unavailable`` (docs/policies.md#the-opa-server-backend)."""
    opa_cache_ttl: Duration = 10.0
    """How long the OPA backend keeps a cached decision at most (it also drops them all when
    OPA reports another bundle revision)."""
    policy_input_mask: tuple[str, ...] = ()
    """Dotted paths of the policy input (``arguments.password``, ``actor.agent_id``) whose
    values the ``policy.decided`` event records as ``"***"`` (docs/policies.md)."""
    max_body_bytes: Size = 1024 * 1024
    max_header_bytes: Size = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    """The most bytes of header names and values one request may carry (more: 431
    ``headers_too_large``); the HTTP server closes a connection whose request line and
    headers pass this by more than 8 KiB before the gateway sees them."""
    request_read_timeout: Duration = Field(default=30.0, gt=0, le=600)
    """How long a request may take to arrive whole (head and body), from its connection's or
    its own first byte; past it the HTTP server answers 408 (or, mid-body, closes the
    connection)."""
    max_json_depth: int = Field(default=32, ge=2, le=256)
    """How deeply objects and arrays may nest in a request body (the body itself is level 1,
    ``arguments`` level 2). Deeper bodies are refused (400 ``json_too_deep``) before parsing
    into the request, validation, hashing or policy see them."""
    max_json_values: int = Field(default=10_000, ge=16, le=1_000_000)
    """How many values (object members and array items, at every level) a call's
    ``arguments`` may hold, counted on their own whichever door carries them, and apart the
    rest of a request body (``jsonlimits.check_call``); more is 400 ``json_too_many_values``.
    It bounds the work one request costs."""
    idempotency_ttl: Duration = 24 * 3600.0
    lock_lease: Duration = 30.0
    approval_ttl: Duration = 3600.0
    approval_secret: str | None = Field(default=None, min_length=32)
    """HMAC key for approval tokens; shared by all replicas. Unset: a random key is made
    once and kept in ``var/approval.key``."""
    faults: str = ""
    """A fault-injection plan (see gateway/faults.py); empty = off."""
    cancel_grace: Duration = 5.0
    """How long an adapter has to stop after a cancel before it is cut off."""
    workers: int = Field(default=4, ge=1, le=256)
    """Concurrent executions of queued (``Prefer: respond-async``) calls per process."""
    sweep_interval: Duration = 5.0
    """How often expired approvals and idempotency records are swept."""
    stream_poll_interval: Duration = Field(default=0.25, gt=0, le=10)
    """How often a live event stream polls the store for new events."""
    stream_heartbeat: Duration = Field(default=15.0, gt=0, le=300)
    """After this much silence a live event stream sends a comment line (proxies keep it open)."""
    stream_max_duration: Duration = Field(default=3600.0, gt=0)
    """A live event stream ends after this long; the client resumes with ``Last-Event-ID``."""
    max_streams_per_principal: int = Field(default=8, ge=1, le=1000)
    """Live event streams one principal may hold open at once, per gateway process."""
    max_streams_total: int = Field(default=256, ge=1, le=100_000)
    """Live event streams open at once in one gateway process, for everyone (more: 503)."""
    max_executions_per_principal: int = Field(default=64, ge=1, le=100_000)
    """Executions one principal may have running at once in one gateway process (more: 429
    ``too_many_executions``); queued ones run by the workers count too."""
    max_executions_total: int = Field(default=256, ge=1, le=100_000)
    """Executions running at once in one gateway process, for everyone (more: 503)."""
    max_queued_per_principal: int = Field(default=1000, ge=1, le=10_000_000)
    """Asynchronous (``Prefer: respond-async``) calls of one principal waiting in the queue,
    across replicas (more: 429 ``too_many_queued``)."""
    max_queued_total: int = Field(default=10_000, ge=1, le=10_000_000)
    """Asynchronous calls waiting in the queue, for everyone, across replicas (more: 503)."""
    max_waiters_per_principal: int = Field(default=32, ge=1, le=100_000)
    """Long-polls (``?wait=``, MCP ``wait_s`` and ``tasks/result``) one principal may hold
    open at once, per gateway process (more: 429 ``too_many_waiters``)."""
    max_waiters_total: int = Field(default=512, ge=1, le=100_000)
    """Long-polls open at once in one gateway process, for everyone (more: 503)."""
    max_pending_approvals_per_principal: int = Field(default=100, ge=1, le=1_000_000)
    """Approval requests of one principal pending at once, across replicas: a call that needs
    one more is refused (429 ``too_many_approvals``) and nothing is parked."""
    ui_session_ttl: Duration = Field(default=8 * 3600.0, gt=0)
    """How long a sign-in to the approvals page (``/ui/``) lasts."""
    principals: tuple[Principal, ...] = ()
    """API key holders (docs/security.md#identities)."""
    jwt: JwtSettings | None = None
    """Bearer JWTs verified against an OIDC provider's keys; set, ``/mcp`` is an OAuth
    protected resource (docs/mcp.md#oauth)."""
    revocation_check: bool = True
    """Refuse a revoked API key (``toolgate keys revoke``): one indexed read of the store per
    authenticated request, so that every replica refuses it at once."""
    admins: tuple[NonEmpty, ...] = ()
    """Principal ids that may use the admin routes (``POST /v1/admin/reload``); none by
    default. ``SIGHUP`` reloads whoever may signal the process."""
    adapters: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-adapter configuration sections (``adapters: {database: {...}}``), each checked by
    its adapter when the gateway starts."""
    process_isolation: str = Field(default="auto", pattern=r"^(auto|required|off)$")
    """Hide var_dir and the configuration file from process-adapter children (docs/security.md)."""
    mcp: McpSettings = Field(default_factory=McpSettings)
    """The MCP endpoint (docs/mcp.md)."""
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    """Prometheus metrics (docs/operations.md#metrics)."""
    log_format: str = Field(default="text", pattern=r"^(text|json)$")
    """``json``: one JSON object per log line, naming the call it is about
    (docs/operations.md#logs)."""
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    decision_log: DecisionLogSettings = Field(default_factory=DecisionLogSettings)
    """One line per policy decision (docs/operations.md#the-decision-log)."""
    """OpenTelemetry tracing (docs/operations.md#tracing)."""
    shadow: ShadowSettings | None = None
    """A candidate policy decided beside the enforcing one, never enforced; its differences
    are recorded (docs/policies.md#shadow-policies)."""
    audit: AuditSettings = Field(default_factory=AuditSettings)
    """The audit trail's checkpoints (docs/security.md#audit-trail)."""
    notifications: NotificationSettings = Field(default_factory=NotificationSettings)
    """Approval notifications, signed POSTs to webhooks
    (docs/operations.md#approval-notifications)."""
    public_url: PublicUrl | None = None
    """The gateway's URL as people reach it (``https://toolgate.example.com``): the base of
    the page links notifications carry. Unset: ``mcp.public_url``, else ``http://host:port``."""

    @field_validator("public_url")
    @classmethod
    def _public_url_bare(cls, value: str | None) -> str | None:
        return None if value is None else value.rstrip("/")

    config_file: Path | None = None
    """The configuration file these settings were read from (set by ``load_settings``)."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """The explicit overrides ``load_settings`` was given (``serve --host/--port``), so that
    a reload reads the file again as start-up did (set by ``load_settings``)."""

    @field_validator("principals")
    @classmethod
    def _unique_principals(cls, value: tuple[Principal, ...]) -> tuple[Principal, ...]:
        hashes: set[str] = set()
        ids: set[str] = set()
        for principal in value:
            for key in principal.all_keys:
                if key.sha256 in hashes:
                    raise ValueError(f"two keys share one hash ({principal.id}, key {key.id})")
                if key.id in ids:
                    raise ValueError(f"two keys have the id {key.id!r} (key ids are unique)")
                hashes.add(key.sha256)
                ids.add(key.id)
        return value

    @model_validator(mode="after")
    def _shares_within_totals(self) -> Settings:
        """A principal's share above the total is a mistake: the total would always answer
        first, and one principal could take everything (docs/security.md#bounded-load)."""
        pairs = [
            ("max_executions_per_principal", "max_executions_total"),
            ("max_queued_per_principal", "max_queued_total"),
            ("max_waiters_per_principal", "max_waiters_total"),
            ("max_streams_per_principal", "max_streams_total"),
        ]
        for share, total in pairs:
            if getattr(self, share) > getattr(self, total):
                raise ValueError(f"{share} ({getattr(self, share)}) is above {total}")
        for key in ("sessions", "listings"):
            share, total = f"max_{key}_per_principal", f"max_{key}_total"
            if getattr(self.mcp, share) > getattr(self.mcp, total):
                raise ValueError(f"mcp.{share} ({getattr(self.mcp, share)}) is above mcp.{total}")
        return self

    @model_validator(mode="after")
    def _shadow_backend(self) -> Settings:
        """The OPA backend asks a second OPA for the candidate: it must be named."""
        if self.shadow is not None and self.policy_backend == "opa" and not self.shadow.opa_url:
            raise ValueError("shadow.opa_url is required with policy_backend: opa")
        return self

    @property
    def page_base_url(self) -> str:
        """Where people reach the gateway's pages: ``public_url``, ``mcp.public_url``, or
        this process's own address."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return self.public_url or self.mcp.public_url or f"http://{host}:{self.port}"

    @property
    def json_limits(self) -> JsonLimits:
        """The JSON bounds of a request's body and arguments: one object for the same bounds
        (asked on every call; kept by value, not on the model, so that a copy with other
        bounds never sees stale ones)."""
        return _json_limits(self.max_json_depth, self.max_json_values)

    def path(self, value: Path) -> Path:
        """``value`` resolved against the configuration file's directory."""
        return value if value.is_absolute() else (self.base_dir / value)

    @property
    def resolved_database_url(self) -> str:
        """The database URL with a relative SQLite path made absolute."""
        url = self.database_url
        prefix = "sqlite:///"
        if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
            return prefix + str(self.base_dir / url[len(prefix) :])
        return url

    def principal_for_key(self, key: str) -> Principal | None:
        """The configured holder of ``key`` (expiry and revocation not considered: to
        authenticate, use ``gateway.http.auth``)."""
        digest = hash_key(key)
        for principal in self.principals:
            if any(k.sha256 == digest for k in principal.all_keys):
                return principal
        return None


def make_directory(path: Path, setting: str) -> None:
    """Create the directory ``path`` (and its parents) that ``setting`` asks for; ConfigError
    names the setting and why not (a file in the way, no permission), never a raw OSError."""
    if "\x00" in str(path):
        raise ConfigError(f"{setting}: a path cannot hold a NUL byte")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is not a directory" if blocker else exc.strerror or str(exc)
        raise ConfigError(f"{setting}: cannot create the directory {path}: {why}") from exc


def hash_key(key: str) -> str:
    """The stored form of an API key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


_ENV = {
    "TOOLGATE_HOST": "host",
    "TOOLGATE_PORT": "port",
    "TOOLGATE_DATABASE_URL": "database_url",
    "TOOLGATE_TOOLS_DIR": "tools_dir",
    "TOOLGATE_REGO_DIR": "rego_dir",
    "TOOLGATE_POLICIES_DIR": "policies_dir",
    "TOOLGATE_VAR_DIR": "var_dir",
    "TOOLGATE_POLICY_BACKEND": "policy_backend",
    "TOOLGATE_OPA_URL": "opa_url",
    "TOOLGATE_OPA_TIMEOUT": "opa_timeout",
    "TOOLGATE_APPROVAL_SECRET": "approval_secret",
    "TOOLGATE_FAULTS": "faults",
    "TOOLGATE_LOG_FORMAT": "log_format",
}
_ENV_NESTED = {"TOOLGATE_MCP_ALLOWED_HOSTS": ("mcp", "allowed_hosts")}
"""Variables that set a key of a section (a comma-separated list)."""
ENV_VARIABLES = frozenset({*_ENV, *_ENV_NESTED, "TOOLGATE_CONFIG", "TOOLGATE_NODE_ID"})
"""Every ``TOOLGATE_*`` variable the gateway reads (docs/configuration.md lists each);
``TOOLGATE_NODE_ID`` is read by ``gateway.instance``."""


def load_settings(
    config: Path | None = None, env: dict[str, str] | None = None, **overrides: Any
) -> Settings:
    """Read the configuration file (if any), apply ``TOOLGATE_*`` and explicit overrides."""
    env = dict(os.environ) if env is None else env
    path = config or Path(env.get("TOOLGATE_CONFIG") or "toolgate.yaml")
    data: dict[str, Any] = {}
    lines = Lines(str(path), {})
    if path.exists():
        raw, lines = load_yaml(path)
        if raw is not None and not isinstance(raw, dict):
            raise ConfigError(f"{path}:1: the configuration must be a mapping")
        data = dict(raw or {})
        data["config_file"] = path.resolve()
    elif config is not None or "TOOLGATE_CONFIG" in env:
        raise ConfigError(f"{path}: configuration file not found")
    data.setdefault("base_dir", path.resolve().parent)
    for var, key in _ENV.items():
        if env.get(var):
            data[key] = env[var]
    for var, (name, key) in _ENV_NESTED.items():
        if env.get(var):
            raw = data.get(name)
            section = dict(raw) if isinstance(raw, dict) else {}
            section[key] = [item.strip() for item in env[var].split(",")]
            data[name] = section
    given = {k: v for k, v in overrides.items() if v is not None}
    data.update(given)
    data["overrides"] = given
    try:
        return Settings.model_validate(data)
    except PydanticValidationError as exc:
        # Never echo a value: the file holds secrets (approval_secret, a database password).
        raise ConfigError(pydantic_problems(exc, lines, (Settings,))) from exc


RELOADABLE: frozenset[str] = frozenset({"adapters"})
"""The keys of ``toolgate.yaml`` a reload applies: what the tools use (``adapters.*``:
database connections, HTTP services and their base URLs, secrets, egress). A change to any
other key is named by the reload and needs a restart (docs/deploy.md#reload); ``toolgate
check`` says which are which."""
_NOT_COMPARED = frozenset({"config_file", "overrides"})


@dataclass(frozen=True, slots=True)
class SettingsChange:
    """What a reload does with ``toolgate.yaml`` read again."""

    settings: Settings
    """The settings of the new generation: the running ones with the reloadable keys
    taken from the file."""
    applied: tuple[str, ...]
    """Reloadable keys that changed (applied now)."""
    restart: tuple[str, ...]
    """Keys that changed and need a restart (not applied)."""


def reread(current: Settings) -> Settings:
    """The settings of ``current``'s configuration file as it is now, with the same
    overrides (the environment is the process's own); ``current`` when it was read from no
    file. ConfigError lists every fault."""
    if current.config_file is None:
        return current
    return load_settings(current.config_file, **current.overrides)


def settings_change(current: Settings, new: Settings) -> SettingsChange:
    """Apply the reloadable keys of ``new`` to ``current``; name every other key that
    changed (one level into sections: ``mcp.allowed_hosts``)."""
    applied: list[str] = []
    restart: list[str] = []
    for key in type(current).model_fields:
        before, after = getattr(current, key), getattr(new, key)
        if key in _NOT_COMPARED or before == after:
            continue
        if key in RELOADABLE:
            applied.append(key)
        else:
            restart.extend(_changed_keys(key, before, after))
    update = {key: getattr(new, key) for key in applied}
    return SettingsChange(current.model_copy(update=update), tuple(applied), tuple(restart))


def _changed_keys(key: str, before: Any, after: Any) -> list[str]:
    if isinstance(before, BaseModel) and isinstance(after, BaseModel):
        fields = type(before).model_fields
        return [f"{key}.{f}" for f in fields if getattr(before, f) != getattr(after, f)]
    return [key]
