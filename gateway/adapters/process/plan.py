"""The plan of one process call: everything rendered and checked before anything starts.

The argv (each ``command`` element a template rendered on its own; a whole-element
reference to a list becomes one element per item), the confined ``cwd``, the child's whole
environment (the declaration's allowlist and constants), stdin, the JUnit report path,
the program, looked up as the declaration says, and what confines it (limits, user,
network: ``gateway.adapters.process.limits``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.adapters.base import AdapterCall
from gateway.adapters.process.limits import confinement
from gateway.adapters.process.sandbox import Confinement
from gateway.adapters.process.spec import MARKER_ENV, CommandArg, LimitOptions, ProcessOptions
from gateway.declarations.templates import Template, TemplateError, lookup
from gateway.errors import ExecutionError, ValidationError
from gateway.workspace import ResolvedPath, Workspace, confine


@dataclass(frozen=True, slots=True)
class Plan:
    argv: tuple[str, ...]
    cwd: ResolvedPath
    env: Mapping[str, str]
    stdin: bytes | None
    junit: ResolvedPath | None
    success_exit_codes: frozenset[int]
    kill_grace: float
    limits: LimitOptions
    confinement: Confinement
    writable: tuple[str, ...] = ()
    """The declaration's extra writable directories (checked per call by the isolation)."""

    @property
    def program(self) -> str:
        return os.path.basename(self.argv[0])


def make_plan(call: AdapterCall, executables: Mapping[str, str]) -> Plan:
    """Render and check the declaration for this call; raises ValidationError/ExecutionError."""
    options = call.tool.options
    assert isinstance(options, ProcessOptions)
    context = call.context
    cwd = _cwd(call.workspace, _render(options.cwd, context, "cwd"))
    env = {name: os.environ[name] for name in options.env.allow if name in os.environ}
    env.update({k: _render(v, context, f"env.set.{k}") for k, v in options.env.constants.items()})
    env[MARKER_ENV] = call.execution_id
    argv = rendered_argv(options, context)
    argv[0] = _program(argv[0], env, cwd.absolute, executables, call.tool.ref)
    stdin = options.stdin
    junit = options.junit
    return Plan(
        argv=tuple(argv),
        cwd=cwd,
        env=env,
        stdin=_render(stdin, context, "stdin").encode("utf-8") if stdin is not None else None,
        junit=_report_path(call.workspace, _render(junit, context, "junit")) if junit else None,
        success_exit_codes=frozenset(options.success_exit_codes),
        kill_grace=options.kill_grace,
        limits=options.limits,
        confinement=confinement(options, call.tool.ref),
        writable=options.writable,
    )


def rendered_argv(options: ProcessOptions, context: Mapping[str, Any]) -> list[str]:
    """The argv of ``command`` for this call, its program as declared (not yet looked up)."""
    return [arg for i, e in enumerate(options.command) for arg in _argv(e, context, i)]


def _render(template: Template, context: Mapping[str, Any], where: str) -> str:
    try:
        text = template.render(context)
    except TemplateError as exc:
        raise _unfilled(where, template, exc) from exc
    if "\x00" in text:
        raise ValidationError(f"{where} contains a NUL byte", code="invalid_arguments")
    return text


def _unfilled(where: str, template: Template, exc: TemplateError) -> ValidationError:
    """A hole with no value: the load checked every reference, so what is left is an
    optional argument without a default. A fault of the declaration, not of the call."""
    return ValidationError(
        f"the declaration cannot be filled in for this call: {where} ({template.source!r}): "
        f"{exc} (the declaration should give that argument a default or require it)",
        code="template_error",
    )


def _argv(element: CommandArg, context: Mapping[str, Any], index: int) -> list[str]:
    """An element's argv items; none for an ``optional`` one with a hole that has no value."""
    if element.optional and not _filled(element.arg, context):
        return []
    return _element(element.arg, context, index)


def _filled(template: Template, context: Mapping[str, Any]) -> bool:
    """Every hole has a value: the argument was sent (or has a default) and is not null."""
    try:
        return all(lookup(context, path) is not None for path in template.references)
    except TemplateError:
        return False


def _element(template: Template, context: Mapping[str, Any], index: int) -> list[str]:
    """One argv element, or one per item when the element is exactly a list-valued hole."""
    where = f"command[{index}]"
    parts = template.parts
    if len(parts) == 1 and not isinstance(parts[0], str) and parts[0].fn is None:
        try:
            value = lookup(context, parts[0].path)
        except TemplateError as exc:
            raise _unfilled(where, template, exc) from exc
        if isinstance(value, list | tuple):
            return [_item(item, where) for item in value]
    return [_render(template, context, where)]


def _item(value: object, where: str) -> str:
    if isinstance(value, dict | list | tuple) or value is None:
        raise ValidationError(f"{where}: list items must be strings or numbers")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if "\x00" in text:
        raise ValidationError(f"{where} contains a NUL byte", code="invalid_arguments")
    return text


def _cwd(workspace: Workspace, raw: str) -> ResolvedPath:
    """``raw`` confined to the workspace; an absolute path is accepted only inside it."""
    if os.path.isabs(raw):
        absolute = Path(raw)
        if absolute == workspace.root or workspace.root in absolute.parents:
            raw = absolute.relative_to(workspace.root).as_posix() or "."
    resolved = confine(workspace, raw, "cwd")
    if not resolved.absolute.is_dir():
        raise ValidationError(
            f"cwd {resolved.relative!r} is not a directory in the workspace", code="invalid_cwd"
        )
    return resolved


def _report_path(workspace: Workspace, raw: str) -> ResolvedPath:
    resolved = confine(workspace, raw, "junit")
    try:
        resolved.absolute.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExecutionError(
            f"cannot create the directory of the test report {resolved.relative}",
            code="test_report_missing",
        ) from exc
    confine(workspace, resolved.relative, "junit")  # a symlink may have been swapped in
    return resolved


def _program(
    name: str, env: Mapping[str, str], cwd: Path, executables: Mapping[str, str], ref: str
) -> str:
    """The path of the program: configured, relative to cwd, or on the child's own PATH."""
    if name in executables:
        found: str | None = executables[name]
    elif "/" in name:
        found = str(cwd / name) if not os.path.isabs(name) else name
    else:
        found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise ExecutionError(
            f"the program {name!r} declared by {ref} was not found or is not executable "
            "(looked up on the PATH of the environment the declaration gives it)",
            code="command_not_found",
        )
    return found
