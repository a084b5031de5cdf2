"""The tool declaration format (``tools.d/*.yaml``) as frozen models that forbid unknown keys.

Adapter-specific keys (``command``, ``url``, ...) are validated by the adapter's own
``Options`` model; everything else is here. ``docs/tool-declaration.schema.json`` is
generated from these models (``toolgate schema declaration``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema, model_validator

from gateway.declarations.located import Faults
from gateway.declarations.semver import Version
from gateway.declarations.templates import Template, TemplateError, compile_template
from gateway.types import LockMode, Risk, SideEffect
from gateway.units import parse_duration, parse_size


def _template(value: Any) -> Template:
    if isinstance(value, Template):
        return value
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError("must be a string template like '{arguments.path}'")
    try:
        return compile_template(str(value))
    except TemplateError as exc:
        raise ValueError(str(exc)) from exc


def _version(value: Any) -> Version:
    if isinstance(value, Version):
        return value
    return Version.parse(str(value))


TemplateStr = Annotated[
    Template,
    PlainValidator(_template),
    WithJsonSchema({"type": "string", "description": "a template with {dotted.path} holes"}),
]
VersionStr = Annotated[
    Version,
    PlainValidator(_version),
    WithJsonSchema({"type": "string", "pattern": r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$"}),
]
Duration = Annotated[
    float,
    PlainValidator(parse_duration),
    WithJsonSchema({"type": ["string", "number"], "examples": ["10s", "250ms", "5m"]}),
]
Size = Annotated[
    int,
    PlainValidator(parse_size),
    WithJsonSchema({"type": ["string", "integer"], "examples": ["64KiB", "1MiB", 4096]}),
]


class Frozen(BaseModel):
    """A part of a declaration, or of an adapter's settings: frozen, unknown keys refused (the
    adapters' option models build on it too)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class LockDecl(Frozen):
    """A resource lock taken before the adapter runs."""

    key: TemplateStr
    mode: LockMode = LockMode.EXCLUSIVE


class _WithParams(BaseModel):
    """A declaration whose extra keys are template parameters (compiled at load)."""

    model_config = ConfigDict(frozen=True, extra="allow", arbitrary_types_allowed=True)

    @model_validator(mode="after")
    def _compile_params(self) -> _WithParams:
        extra = self.__pydantic_extra__ or {}
        faults = Faults()  # every bad parameter, each at its own key
        for key, value in list(extra.items()):
            try:
                extra[key] = _template(value)
            except ValueError as exc:
                faults.add((key,), str(exc), value)
        faults.raise_any(type(self).__name__)
        return self

    @property
    def params(self) -> dict[str, Template]:
        return dict(self.__pydantic_extra__ or {})


class ProbeDecl(_WithParams):
    """A read of real state: ``probe`` names an adapter probe; other keys are its parameters.

    ``equals`` (a template) is the value the probe must return; without it, a probe passes
    when it returns a truthy value.
    """

    probe: str = Field(min_length=1)
    equals: TemplateStr | None = None


class StateGuardDecl(_WithParams):
    """Compare ``expected_state[expected]`` of the request with probe ``actual``."""

    expected: str = Field(min_length=1)
    actual: str = Field(min_length=1)


class ApprovalDecl(Frozen):
    """What an approver may do besides approve or deny (``approval: {editable: [...]}``)."""

    editable: tuple[str, ...] = ()
    """Top-level arguments (keys of ``input``) the approver may change before approving."""


class ToolDeclaration(Frozen):
    """One version of one tool."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$", max_length=128)
    version: VersionStr
    description: str = Field(min_length=1)
    adapter: str
    operation: str = Field(min_length=1)
    risk: Risk
    side_effect: SideEffect
    reversible: bool = False
    tags: tuple[str, ...] = ()
    input: dict[str, Any] = Field(default_factory=dict)
    output: dict[str, Any] | None = None
    """The contract of the result's ``data`` (a cerberus schema of its fields), checked on
    every successful call and published as JSON Schema; None: the tool promises no shape."""
    paths: tuple[str, ...] = ()
    locks: tuple[LockDecl, ...] = ()
    state_guards: tuple[StateGuardDecl, ...] = ()
    timeout: Duration = 30.0
    idempotency: Literal["required", "optional", "none"] = "optional"
    output_budget: Size = 64 * 1024
    verify: tuple[ProbeDecl, ...] = ()
    reconcile: tuple[ProbeDecl, ...] = ()
    approval: ApprovalDecl = Field(default_factory=ApprovalDecl)
    deprecated: bool | str = False
    disabled: bool = False
    options: Any = None
    """Adapter-specific settings, validated by the adapter's ``Options`` model."""

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @cached_property
    def policy_input(self) -> dict[str, Any]:
        """The ``tool`` part of the policy input (docs/policies.md): what the declaration
        says. Made once per declaration (which is immutable, and never copied with changes)
        and shared by the documents of its calls, which nothing mutates (the recorded input
        and the decision log copy what they change): ``pipeline.policy.tool_input`` is a
        copy of one's own."""
        return {
            "name": self.name,
            "version": str(self.version),
            "risk": self.risk.value,
            "side_effect": self.side_effect.value,
            "reversible": self.reversible,
            "adapter": self.adapter,
            "operation": self.operation,
            "tags": list(self.tags),
        }

    def summary(self) -> dict[str, Any]:
        """The public description of this version (no input schema)."""
        return {
            "name": self.name,
            "version": str(self.version),
            "description": self.description,
            "adapter": self.adapter,
            "operation": self.operation,
            "risk": self.risk.value,
            "side_effect": self.side_effect.value,
            "reversible": self.reversible,
            "tags": list(self.tags),
            "idempotency": self.idempotency,
            "timeout_s": self.timeout,
            "deprecated": self.deprecated,
        }
