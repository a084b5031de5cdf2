"""What ``adapter: process`` declarations may say, checked when ``tools.d`` loads.

The argv (its program fixed, every element a template), the working directory, the
child's whole environment, stdin, exit codes, the JUnit report, and what confines the child
(``limits``, ``user``/``group``, ``network``, the extra ``writable`` directories); the
``adapters.process`` settings; the ``AdapterSpec`` the loader checks a declaration against.
Light on purpose: no psutil, no adapter; docs/adapters/process.md documents every key.
"""

from __future__ import annotations

import grp
import posixpath
import pwd
import re
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gateway.declarations.located import Faults
from gateway.declarations.model import Duration, Frozen, Size, TemplateStr
from gateway.declarations.spec import AdapterSpec
from gateway.declarations.templates import Template, compile_template

MARKER_ENV = "TOOLGATE_EXECUTION_ID"
"""Set in every command's environment to the execution id; descendants inherit it (how
``gateway.adapters.process.proctree`` finds a call's processes again)."""
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class EnvOptions(Frozen):
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


class CommandArg(Frozen):
    """One argv element: a template, written as a string, or as ``{arg: TEMPLATE, optional:
    true}`` for an element left out of argv when one of its holes has no value (an optional
    argument the call did not send and that has no default, or null)."""

    arg: TemplateStr
    optional: bool = False
    """Left out when a hole has no value; without it, a hole that may have none is a load
    error."""


def _command_arg(value: Any) -> Any:
    """A plain string is an element that is never left out."""
    return value if isinstance(value, dict | CommandArg) else {"arg": value}


Element = Annotated[
    CommandArg,
    BeforeValidator(_command_arg),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "description": "a template with {dotted.path} holes"},
                {
                    "type": "object",
                    "properties": {"arg": {"type": "string"}, "optional": {"type": "boolean"}},
                    "required": ["arg"],
                    "additionalProperties": False,
                },
            ]
        }
    ),
]


def _exit_code(value: int) -> int:
    if not 0 <= value <= 255:
        raise ValueError("success_exit_codes must be between 0 and 255")
    return value


def _kill_grace(value: float) -> float:
    if not 0 <= value <= 60:
        raise ValueError("kill_grace must be between 0s and 60s")
    return value


def _between(low: int, high: int, unit: str = "") -> AfterValidator:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise ValueError(f"must be between {low}{unit} and {high}{unit}")
        return value

    return AfterValidator(check)


MIB = 1024 * 1024


class LimitOptions(Frozen):
    """Kernel limits set in the child before ``exec`` (``setrlimit``); each is per process
    and inherited by the child's descendants. None: the gateway's own limit stays."""

    cpu_seconds: Annotated[int, _between(1, 7 * 86400, "s")] | None = None
    """RLIMIT_CPU: CPU seconds (user + system); SIGXCPU then, SIGKILL one second later."""
    memory: Annotated[Size, _between(16 * MIB, 2**50)] | None = None
    """RLIMIT_AS: the address space in bytes (virtual memory, not resident memory)."""
    file_size: Annotated[Size, _between(1, 2**62)] | None = None
    """RLIMIT_FSIZE: the largest file the child may write (SIGXFSZ, or EFBIG)."""
    open_files: Annotated[int, _between(8, 1 << 20)] | None = None
    """RLIMIT_NOFILE: one more than the highest file descriptor the child may open."""
    processes: Annotated[int, _between(1, 1 << 22)] | None = None
    """RLIMIT_NPROC: processes (and threads) of the child's real user, counted over all of
    that user's processes; not enforced for root (refused then: see the docs)."""
    no_new_privs: bool = True
    """PR_SET_NO_NEW_PRIVS: setuid/setgid bits and file capabilities grant nothing."""

    def rlimits(self) -> dict[str, int]:
        """The declared limits by name (``cpu_seconds`` ...), None ones left out."""
        names = ("cpu_seconds", "memory", "file_size", "open_files", "processes")
        values = {name: getattr(self, name) for name in names}
        return {name: value for name, value in values.items() if value is not None}


def _known(what: str, lookup: Callable[[str], object]) -> Callable[[str], str]:
    """A validator of a user or group: a number as it is, a name only when ``lookup`` (the
    machine's ``pwd``/``grp`` database) knows it."""

    def known(value: str) -> str:
        if value.isdigit():
            return value
        try:
            lookup(value)
        except KeyError:
            raise ValueError(f"there is no {what} {value!r} on this machine") from None
        return value

    return known


_known_user = _known("user", pwd.getpwnam)
_known_group = _known("group", grp.getgrnam)


def _writable_path(value: str) -> str:
    if "\x00" in value:
        raise ValueError("a writable path may not contain a NUL byte")
    if not value.startswith("/"):
        raise ValueError(
            f"{value!r} must be an absolute path (the workspace is writable already; "
            "this names a directory outside it, such as a cache)"
        )
    normal = posixpath.normpath(value)
    if normal == "/":
        raise ValueError("'/' (the root of the filesystem) cannot be made writable")
    if normal != value.rstrip("/"):
        raise ValueError(f"{value!r} must be normalised: no '.', '..' or '//' in it")
    return normal


class ProcessOptions(Frozen):
    """The declaration keys of ``adapter: process`` (documented in docs/adapters/process.md)."""

    command: tuple[Element, ...] = Field(min_length=1)
    cwd: TemplateStr = Field(default_factory=lambda: compile_template("."))
    env: EnvOptions = Field(default_factory=EnvOptions)
    stdin: TemplateStr | None = None
    success_exit_codes: tuple[Annotated[int, AfterValidator(_exit_code)], ...] = Field(
        default=(0,), min_length=1
    )
    junit: TemplateStr | None = None
    kill_grace: Annotated[Duration, AfterValidator(_kill_grace)] = 2.0
    limits: LimitOptions = Field(default_factory=LimitOptions)
    user: Annotated[str, AfterValidator(_known_user)] | None = None
    """Run as this user (a name or a numeric uid); the gateway must be root."""
    group: Annotated[str, AfterValidator(_known_group)] | None = None
    """Run with this group (name or gid); default: the user's primary group."""
    network: Literal["host", "none"] = "host"
    """``none``: a network namespace of its own, without any interface but a down loopback."""
    writable: tuple[Annotated[str, AfterValidator(_writable_path)], ...] = ()
    """Absolute directories the command may write besides its workspace and its own /tmp
    (under process isolation everything else is read-only); never one of the gateway's own
    directories (checked when the adapter is built, and again per call)."""

    @field_validator("command")
    @classmethod
    def _fixed_program(cls, command: tuple[CommandArg, ...]) -> tuple[CommandArg, ...]:
        program = command[0].arg
        if program.references or not program.source.strip() or command[0].optional:
            faults = Faults()
            message = "command[0] (the program) must be a fixed, non-empty name or path"
            faults.add((0,), message, program.source)
            faults.raise_any("command")
        return command

    def fills_absent(self, loc: tuple[str | int, ...], template: Template) -> bool:
        """A command element marked ``optional`` is left out when a hole has no value (the
        loader's check of holes that may have none: ``declarations.spec.FillsAbsent``)."""
        if loc[0] != "command" or not isinstance(loc[1], int):
            return False
        return self.command[loc[1]].optional

    def templates(self) -> Iterable[tuple[tuple[str | int, ...], Template]]:
        """Every template, with its location, for the loader's reference check."""
        for i, element in enumerate(self.command):
            yield ("command", i), element.arg
        yield ("cwd",), self.cwd
        for name, value in self.env.constants.items():
            yield ("env", "set", name), value
        if self.stdin is not None:
            yield ("stdin",), self.stdin
        if self.junit is not None:
            yield ("junit",), self.junit


class ProcessSettings(Frozen):
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
    absent_hint={
        "command": "declare the element as {arg: ..., optional: true} to leave it out then"
    },
)
