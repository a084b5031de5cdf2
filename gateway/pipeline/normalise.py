"""Stage 2 — normalise: workspace, path confinement, cerberus normalisation, hashes.

Approval binds to the hash of the *normalised* arguments, so two spellings of one call
(defaults filled in, ``./a.txt`` vs ``a.txt``) are the same call. Path arguments are confined
(and so normalised) before the input schema checks them: a ``regex`` on a path sees the
workspace-relative form the adapter will use (``docs/x.md`` for ``./docs//x.md``).

The work is bounded: arguments deeper or larger than the gateway's JSON limits are refused
before any validator walks them, validation stops after ``JsonValidator.max_errors`` errors,
and large arguments are validated in a worker thread so that the event loop keeps serving
other requests meanwhile.
"""

from __future__ import annotations

from typing import Any

import anyio

from gateway import jsonlimits
from gateway.declarations.fastvalid import FastValidator
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ValidationError
from gateway.pipeline.records import Call, Prepared, Resolved, ToolExecutionRequest, sha256_json
from gateway.pipeline.services import Services
from gateway.workspace import ResolvedPath, Workspace, confine

# Arguments with more values or text than this are validated off the event loop (a fresh
# validator per call: about a millisecond, which only such calls pay).
OFF_LOOP_VALUES = 500
OFF_LOOP_CHARS = 256 * 1024


async def run(services: Services, state: Resolved) -> Prepared:
    req, tool = state.ticket.request, state.tool
    workspace = services.workspaces.get(req.workspace_id)
    if workspace is None:
        raise ValidationError(
            f"workspace {req.workspace_id!r} is not declared", code="unknown_workspace"
        )
    if req.workspace_root is not None and req.workspace_root != str(workspace.root):
        raise ValidationError(
            "workspace.root does not match the declared root of the workspace; omit it",
            code="workspace_root_mismatch",
        )
    shape = _shape(services, req)
    validator = services.catalogue.validator(tool)
    if shape.values > OFF_LOOP_VALUES or shape.chars > OFF_LOOP_CHARS:
        arguments, paths = await anyio.to_thread.run_sync(
            _normalise, tool, workspace, validator.fresh(), dict(req.arguments)
        )
    else:
        arguments, paths = _normalise(tool, workspace, validator, dict(req.arguments))
    call = Call(
        state.ticket,
        tool,
        workspace,
        arguments,
        sha256_json(arguments),
        paths,
        services.roles(req.principal, req.roles),
    )
    return Prepared(call, state.trail)


def _shape(services: Services, req: ToolExecutionRequest) -> jsonlimits.Shape:
    """An upper bound of the arguments' shape. Not measured again when the door that
    parsed them checked them, as part of its body, against the limits in force (the REST
    door): only when they are still that very object and the bound is small enough to
    decide that they are validated on the loop. Every other request (the CLI's, one edited
    before approval, one rebuilt from the store) is checked here."""
    bound = req.arguments_bound
    if (
        bound is not None
        and bound.shape.values <= OFF_LOOP_VALUES
        and bound.shape.chars <= OFF_LOOP_CHARS
        and bound.limits == services.settings.json_limits
    ):
        return bound.shape
    return _bounded(services, req.arguments)


def _bounded(services: Services, arguments: Any) -> jsonlimits.Shape:
    """The shape of the arguments, refused when over the JSON limits (a request that did not
    come through the HTTP door, which checks the whole body, or was stored before them)."""
    try:
        return jsonlimits.check_arguments(arguments, services.settings.json_limits)
    except jsonlimits.JsonLimitError as exc:
        raise ValidationError(
            f"the arguments are refused before validation: {exc.message}",
            code="invalid_arguments",
            details={"limit": exc.code},
        ) from exc


def _confine_paths(
    tool: ToolDeclaration,
    workspace: Workspace,
    arguments: dict[str, Any],
    known: dict[str, ResolvedPath] | None,
) -> dict[str, ResolvedPath]:
    """Confine every path the tool declares, in place (each becomes its workspace-relative
    form). The first pass (``known`` is ``None``) skips values that are not strings, and empty
    strings: the input schema reports them (an empty path the schema lets through is the
    workspace root, ``"."``); the second reuses what the first confined at the same place."""
    paths: dict[str, ResolvedPath] = {}
    for spec in tool.paths:
        for where, container, key in _path_slots(arguments, spec.split(".")):
            value = container[key]
            if known is None and (not isinstance(value, str) or not value):
                continue  # the input schema judges it (a number, ``""`` under ``empty: false``)
            done = (known or {}).get(where)
            if done is None or done.relative != value:
                done = confine(workspace, value, where)
            paths[where] = done
            container[key] = done.relative
    return paths


def _path_slots(value: Any, parts: list[str], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted location, container, key) of every value a path spec names; ``*`` walks a
    list (``files.*.path``). Missing optional values are skipped."""
    head, rest = parts[0], parts[1:]
    if head == "*":
        items = value if isinstance(value, list) else []
        keys: list[Any] = list(range(len(items)))
    else:
        keys = [head] if isinstance(value, dict) and head in value else []
    found = []
    for key in keys:
        where = f"{prefix}{key}"
        if rest:
            found.extend(_path_slots(value[key], rest, where + "."))
        else:
            found.append((where, value, key))
    return found


def _normalise(
    tool: ToolDeclaration, workspace: Workspace, validator: FastValidator, raw: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, ResolvedPath]]:
    """Confine the paths, validate and normalise against the input schema, then confine the
    paths the schema filled in (defaults). Synchronous code: it runs on the loop or in a thread."""
    first = _confine_paths(tool, workspace, raw, None)
    if not validator.validate(raw):
        errors = validator.errors
        more = " (and more: validation stopped there)" if validator.errors_truncated else ""
        raise ValidationError(
            f"the arguments do not match the input schema of {tool.ref}: "
            + _describe(errors)
            + more,
            code="invalid_arguments",
            details={"errors": errors, "errors_truncated": validator.errors_truncated},
        )
    arguments = dict(validator.document)
    return arguments, _confine_paths(tool, workspace, arguments, first)


def _describe(errors: dict[str, Any]) -> str:
    parts = []
    for field, problems in sorted(errors.items(), key=lambda item: str(item[0])):
        text = "; ".join(str(p) for p in problems) if isinstance(problems, list) else problems
        parts.append(f"{field}: {text}")
    return ", ".join(parts)
