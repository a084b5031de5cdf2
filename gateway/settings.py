"""Gateway settings: ``toolgate.yaml`` (or ``$TOOLGATE_CONFIG``) plus ``TOOLGATE_*`` overrides.

Parsed once at the edge into a frozen model that forbids unknown keys. Relative paths in
the file are relative to the file's directory.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError

from gateway.errors import ConfigError
from gateway.jsonlimits import JsonLimits
from gateway.units import parse_duration, parse_size
from gateway.yamlsrc import Lines, load_yaml, pydantic_problems

Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Principal(_Frozen):
    """An API key holder. Only the sha256 of the key is stored."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.@-]+$")
    key_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    label: str = ""


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
    path: str = "-"
    """``-``: standard output; else a file (relative to the configuration file), appended to."""
    mask: tuple[MaskPath, ...] = ()
    """Input fields erased from every event, as OPA names them: ``/input/arguments/content``."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Added to every event's ``labels`` (next to ``id`` and ``version``)."""


class McpSettings(_Frozen):
    """The MCP endpoint at ``/mcp`` (docs/mcp.md)."""

    allowed_hosts: tuple[str, ...] = ("127.0.0.1:*", "localhost:*", "[::1]:*")
    """``Host`` values the endpoint answers (DNS-rebinding protection); ``name:*`` is any port."""
    allowed_origins: tuple[str, ...] = (
        "http://127.0.0.1:*",
        "http://localhost:*",
        "http://[::1]:*",
    )
    """``Origin`` values accepted when a request carries one (a browser's)."""
    workspace: str | None = None
    """The workspace of a call that names none in ``_meta`` (``io.toolgate/workspace``)."""
    task_wait: Duration = Field(default=2.0, ge=0, le=60)
    """How long ``tools/call`` waits for a call before answering a task-capable client with a
    task instead of the result."""


class AuditSettings(_Frozen):
    """The audit trail's signed checkpoints (docs/security.md#audit-trail)."""

    checkpoint_interval: Duration = Field(default=60.0, ge=0)
    """How often a gateway signs a checkpoint of the event chains that moved (one replica
    does it; the others see it done and skip); 0: never by itself, only on demand
    (``toolgate audit checkpoint``)."""
    signing_key: Path | None = None
    """An Ed25519 private key (PEM, PKCS #8, unencrypted) that signs checkpoints; every
    replica takes the same. Unset: one is made once in ``var/audit.key``."""
    public_keys: tuple[Path, ...] = ()
    """More Ed25519 public keys (PEM files) whose checkpoints verify: a retired key's, or
    another replica's that signs with a key of its own."""


class Settings(_Frozen):
    base_dir: Path
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    database_url: str = "sqlite:///var/toolgate.db"
    tools_dir: Path = Path("tools.d")
    rego_dir: Path = Path("rego")
    policies_dir: Path = Path("policies")
    var_dir: Path = Path("var")
    policy_backend: str = Field(default="embedded", pattern=r"^(embedded|opa)$")
    opa_url: str = "http://127.0.0.1:8181"
    opa_timeout: Duration = Field(default=0.25, gt=0, le=30)
    """The deadline of one decision by the OPA server (``policy_backend: opa``); past it the
    call is denied (docs/policies.md#the-opa-server-backend)."""
    opa_cache_ttl: Duration = 10.0
    """How long the OPA backend keeps a cached decision at most (it also drops them all when
    OPA reports another bundle revision)."""
    policy_input_mask: tuple[str, ...] = ()
    """Dotted paths of the policy input (``arguments.password``, ``actor.agent_id``) whose
    values the ``policy.decided`` event records as ``"***"`` (docs/policies.md)."""
    max_body_bytes: Size = 1024 * 1024
    max_json_depth: int = Field(default=32, ge=2, le=256)
    """How deeply objects and arrays may nest in a request body (the body itself is level 1,
    ``arguments`` level 2). Deeper bodies are refused (400 ``json_too_deep``) before parsing
    into the request, validation, hashing or policy see them."""
    max_json_values: int = Field(default=10_000, ge=16, le=1_000_000)
    """How many values (object members and array items, at every level) a request body may
    hold; more is 400 ``json_too_many_values``. It bounds the work one request costs."""
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
    ui_session_ttl: Duration = Field(default=8 * 3600.0, gt=0)
    """How long a sign-in to the approvals page (``/ui/``) lasts."""
    principals: tuple[Principal, ...] = ()
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
    audit: AuditSettings = Field(default_factory=AuditSettings)
    """The audit trail's checkpoints (docs/security.md#audit-trail)."""
    config_file: Path | None = None
    """The configuration file these settings were read from (set by ``load_settings``)."""

    @field_validator("principals")
    @classmethod
    def _unique_principals(cls, value: tuple[Principal, ...]) -> tuple[Principal, ...]:
        seen: set[str] = set()
        for principal in value:
            if principal.key_sha256 in seen:
                raise ValueError(f"two principals share one key ({principal.id})")
            seen.add(principal.key_sha256)
        return value

    @property
    def json_limits(self) -> JsonLimits:
        return JsonLimits(max_depth=self.max_json_depth, max_values=self.max_json_values)

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
        digest = hash_key(key)
        for principal in self.principals:
            if principal.key_sha256 == digest:
                return principal
        return None


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
ENV_VARIABLES = frozenset({*_ENV, *_ENV_NESTED, "TOOLGATE_CONFIG"})
"""Every ``TOOLGATE_*`` variable the settings read (docs/configuration.md lists each)."""


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
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings.model_validate(data)
    except PydanticValidationError as exc:
        raise ConfigError(pydantic_problems(exc, lines)) from exc
