"""What ``adapter: process`` declarations may say, checked when ``tools.d`` loads.

The argv (its program fixed, every element a template), the working directory, the
child's whole environment, stdin, exit codes and the JUnit report; the ``adapters.process``
settings; the ``AdapterSpec`` the loader checks a declaration against. Light on purpose: no
psutil, no adapter; docs/adapters/process.md documents every key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.declarations.located import Faults
from gateway.declarations.model import Duration, TemplateStr
from gateway.declarations.spec import AdapterSpec
from gateway.declarations.templates import Template, compile_template

MARKER_ENV = "TOOLGATE_EXECUTION_ID"
"""Set in every command's environment to the execution id; descendants inherit it (how
``gateway.adapters.process.proctree`` finds a call's processes again)."""
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class EnvOptions(_Frozen):
    """The child's whole environment: nothing is inherited unless listed in ``allow``."""

    allow: tuple[str, ...] = ()
    """Names copied from the gateway's environment when they are set there."""
    constants: dict[str, TemplateStr] = Field(default_factory=dict, alias="set")
    """Names set to a template's value (rendered per call)."""

    @model_validator(mode="after")
    def _check_names(self) -> EnvOptions:
        faults = Faults()
        names: list[tuple[tuple[str | int, ...], str]] = [
            *((("allow", i), name) for i, name in enumerate(self.allow)),
            *((("set", name), name) for name in self.constants),
        ]
        for loc, name in names:
            if not re.match(_ENV_NAME, name):
                faults.add(loc, f"{name!r} is not an environment variable name", name)
            elif name == MARKER_ENV:
                faults.add(loc, f"{MARKER_ENV} is set by the gateway itself", name)
        faults.raise_any("EnvOptions")
        return self


def _exit_code(value: int) -> int:
    if not 0 <= value <= 255:
        raise ValueError("success_exit_codes must be between 0 and 255")
    return value


def _kill_grace(value: float) -> float:
    if not 0 <= value <= 60:
        raise ValueError("kill_grace must be between 0s and 60s")
    return value


class ProcessOptions(_Frozen):
    """The declaration keys of ``adapter: process`` (documented in docs/adapters/process.md)."""

    command: tuple[TemplateStr, ...] = Field(min_length=1)
    cwd: TemplateStr = Field(default_factory=lambda: compile_template("."))
    env: EnvOptions = Field(default_factory=EnvOptions)
    stdin: TemplateStr | None = None
    success_exit_codes: tuple[Annotated[int, AfterValidator(_exit_code)], ...] = Field(
        default=(0,), min_length=1
    )
    junit: TemplateStr | None = None
    kill_grace: Annotated[Duration, AfterValidator(_kill_grace)] = 2.0

    @field_validator("command")
    @classmethod
    def _fixed_program(cls, command: tuple[Template, ...]) -> tuple[Template, ...]:
        program = command[0]
        if program.references or not program.source.strip():
            faults = Faults()
            message = "command[0] (the program) must be a fixed, non-empty name or path"
            faults.add((0,), message, program.source)
            faults.raise_any("command")
        return command

    def templates(self) -> Iterable[tuple[tuple[str | int, ...], Template]]:
        """Every template, with its location, for the loader's reference check."""
        for i, element in enumerate(self.command):
            yield ("command", i), element
        yield ("cwd",), self.cwd
        for name, value in self.env.constants.items():
            yield ("env", "set", name), value
        if self.stdin is not None:
            yield ("stdin",), self.stdin
        if self.junit is not None:
            yield ("junit",), self.junit


class ProcessSettings(_Frozen):
    """The ``adapters.process`` section of the gateway configuration."""

    executables: dict[str, str] = Field(default_factory=dict)
    """Program names mapped to absolute paths; ``python`` defaults to the gateway's own."""
    subreaper: bool = True
    """Make the gateway a child subreaper (Linux) so that no descendant escapes tracking."""


SPEC = AdapterSpec(
    name="process",
    operations={"run": frozenset({"none", "read", "write", "external"})},
    probes={"file_sha256": frozenset({"path"}), "file_exists": frozenset({"path"})},
    options=ProcessOptions,
    durable_reads=True,  # a read still leaves a process tree to stop after a crash
)
