"""Stage 2 — normalise: workspace, cerberus normalisation, path confinement, hashes.

Approval binds to the hash of the *normalised* arguments, so two spellings of one call
(defaults filled in, ``./a.txt`` vs ``a.txt``) are the same call.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import ValidationError
from gateway.pipeline.records import Flow, sha256_json
from gateway.pipeline.services import Services
from gateway.workspace import ResolvedPath, confine


async def run(services: Services, flow: Flow) -> Flow:
    req = flow.request
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
    assert flow.tool is not None
    arguments = _normalise(services, flow, req.arguments)
    paths: dict[str, ResolvedPath] = {}
    for spec in flow.tool.paths:
        for where, container, key in _path_slots(arguments, spec.split(".")):
            resolved = confine(workspace, container[key], where)
            paths[where] = resolved
            container[key] = resolved.relative
    return flow.but(
        workspace=workspace,
        arguments=arguments,
        paths=paths,
        arguments_sha256=sha256_json(arguments),
        roles=services.roles(req.principal),
    )


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


def _normalise(services: Services, flow: Flow, raw: Any) -> dict[str, Any]:
    assert flow.tool is not None
    validator = services.catalogue.validator(flow.tool)
    if not validator.validate(dict(raw)):
        errors = validator.errors
        raise ValidationError(
            f"the arguments do not match the input schema of {flow.tool.ref}: " + _describe(errors),
            code="invalid_arguments",
            details={"errors": errors},
        )
    return dict(validator.document)


def _describe(errors: dict[str, Any]) -> str:
    parts = []
    for field, problems in sorted(errors.items()):
        text = "; ".join(str(p) for p in problems) if isinstance(problems, list) else problems
        parts.append(f"{field}: {text}")
    return ", ".join(parts)
