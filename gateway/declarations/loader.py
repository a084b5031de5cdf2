"""Load ``tools.d`` into a Catalogue, checking everything a call would later rely on.

All files are read and every fault is collected; any fault means the whole load fails
(a bad file never replaces a good catalogue) and each message names file, line and key.
Each file is parsed once; the specs to check against are given (the shipped ones are
``gateway.adapters.registry.SPECS``): this package imports no adapter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from gateway.declarations.catalogue import Catalogue
from gateway.declarations.jsonschema import (
    cerberus_to_json_schema,
    unmapped_rules,
    validate_cerberus_schema,
)
from gateway.declarations.model import ProbeDecl, ToolDeclaration
from gateway.declarations.spec import AdapterSpec, FillsAbsent, Loc, Templating
from gateway.declarations.templates import FIELDS, Template
from gateway.errors import ConfigError
from gateway.yamlsrc import Lines, load_yaml, parse_yaml, pydantic_problems

_COMMON_KEYS = frozenset(ToolDeclaration.model_fields) - {"options"}
_HIDDEN = frozenset({"options"})
"""The model's field for the adapter's keys, which a file writes at the top level."""


def load_catalogue(tools_dir: Path, specs: Mapping[str, AdapterSpec]) -> Catalogue:
    """Read every ``*.yaml``/``*.yml`` below ``tools_dir``; raise ConfigError listing all faults."""
    catalogue, problems = read_catalogue(tools_dir, specs)
    if problems:
        raise ConfigError(problems)
    return catalogue


def read_catalogue(
    tools_dir: Path, specs: Mapping[str, AdapterSpec], faulty: bool = False
) -> tuple[Catalogue, list[str]]:
    """The tools that load, and the faults of those that do not (for a check that reports
    everything at once: the good tools can still be checked against the configuration).
    ``faulty``: the catalogue also holds the tools that have faults but could be built, so
    that ``check`` runs the adapters' checks on them in the same run (never to serve)."""
    if not tools_dir.is_dir():
        raise ConfigError(f"{tools_dir}: the tools directory does not exist")
    files = sorted(p for p in tools_dir.rglob("*") if p.suffix in (".yaml", ".yml"))
    problems: list[str] = []
    tools: list[ToolDeclaration] = []
    where: dict[str, Lines] = {}
    seen: dict[tuple[str, str], str] = {}
    contents: dict[str, bytes] = {}
    for path in files:
        try:
            raw = _read(path)
            contents[path.relative_to(tools_dir).as_posix()] = raw
            tool, lines, faults = _load(path, specs, raw.decode("utf-8"))
        except ConfigError as exc:
            tool, faults = None, exc.problems
        problems.extend(sorted(faults, key=lambda p: _line_of(p, str(path))))
        if tool is None or (faults and not faulty):
            continue
        key = (tool.name, str(tool.version))
        if key in seen:
            problems.append(
                f"{lines.where(('version',))}: {tool.ref} is declared twice (also in {seen[key]})"
            )
            continue
        seen[key] = str(path)
        tools.append(tool)
        where[tool.ref] = lines
    return Catalogue(tools, where, revision_of(contents)), problems


def _read(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}:1: cannot read: {exc}") from exc
    return raw


def revision_of(contents: Mapping[str, bytes]) -> str:
    """The catalogue revision: a digest of each file's path below tools.d and its bytes, so
    that replicas reading the same files agree on it wherever the directory is."""
    digest = hashlib.sha256()
    for name in sorted(contents):
        digest.update(name.encode("utf-8") + b"\0")
        digest.update(hashlib.sha256(contents[name]).digest())
    return digest.hexdigest()[:32]


def _line_of(problem: str, file: str) -> int:
    """The line a ``file:line: ...`` message names (0 when it names none), to sort by."""
    line = problem.removeprefix(f"{file}:").partition(":")[0]
    return int(line) if line.isdigit() else 0


def load_declaration(
    path: Path, specs: Mapping[str, AdapterSpec], text: str | None = None
) -> tuple[ToolDeclaration, Lines]:
    """Parse and check one declaration file (``text``: its content, already read)."""
    tool, lines, problems = _load(path, specs, text)
    if problems or tool is None:
        raise ConfigError(problems)
    return tool, lines


_REFERENCED = frozenset({"input", "paths"})
"""Common keys other keys name (templates, path and editable arguments)."""


def _load(
    path: Path, specs: Mapping[str, AdapterSpec], text: str | None = None
) -> tuple[ToolDeclaration | None, Lines, list[str]]:
    """The declaration (None when it cannot be built) and every fault of both rounds: the
    shape of each key, then what the file means. A key with a fault of the first round is
    left out for the second, so the other keys' faults come in the same run; unless other
    keys name it (``input``, a database ``binds``): their checks would only report it
    missing, so the second round waits for it."""
    raw, lines = load_yaml(path) if text is None else parse_yaml(text, str(path))
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}:1: a tool declaration must be a mapping of keys")
    tool, problems, faulty_keys = _validate(raw, lines, specs)
    if tool is None:
        return None, lines, problems
    spec = specs[tool.adapter]
    if faulty_keys & (_REFERENCED | spec.referenced):
        return None, lines, problems
    problems.extend(_check(tool, lines, spec))
    return tool, lines, problems


def _validate(
    raw: dict[str, Any], lines: Lines, specs: Mapping[str, AdapterSpec]
) -> tuple[ToolDeclaration | None, list[str], frozenset[str]]:
    """The declaration, its faults of shape, and the top-level keys they are at. With
    faults, the declaration is built without those keys, a required one replaced by the
    adapter's stand-in (``AdapterSpec.stand_ins``); None when that fails too (a required key
    with no stand-in, a fault of the whole document)."""
    problems, faulty = _shape_faults(raw, lines, specs)
    if not problems:
        return _build(raw, specs), [], frozenset()
    if None in faulty:
        return None, problems, frozenset()
    keys = frozenset(str(key) for key in faulty)
    kept = {k: v for k, v in raw.items() if k not in keys}
    stand_ins = specs[raw["adapter"]].stand_ins
    kept.update({k: stand_ins[k] for k in keys if k in stand_ins})
    try:
        return _build(kept, specs), problems, keys
    except (PydanticValidationError, ConfigError):
        return None, problems, keys


def _build(raw: dict[str, Any], specs: Mapping[str, AdapterSpec]) -> ToolDeclaration:
    spec = specs[raw["adapter"]]
    options = spec.options.model_validate(_split(raw, spec)[1])
    return ToolDeclaration.model_validate({**_split(raw, spec)[0], "options": options})


def _split(raw: dict[str, Any], spec: AdapterSpec | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The common keys, and the adapter's own."""
    option_keys = set(spec.options.model_fields) if spec is not None else set()
    common = {k: v for k, v in raw.items() if k not in option_keys or k in _COMMON_KEYS}
    options = {k: v for k, v in raw.items() if k in option_keys and k not in _COMMON_KEYS}
    return common, options


def _shape_faults(
    raw: dict[str, Any], lines: Lines, specs: Mapping[str, AdapterSpec]
) -> tuple[list[str], set[str | int | None]]:
    """Every fault of the first round, and the top-level key of each (None: no key, or
    the adapter is unknown: nothing can be built)."""
    problems: list[str] = []
    faulty: set[str | int | None] = set()
    adapter = raw.get("adapter")
    spec = specs.get(adapter) if isinstance(adapter, str) else None
    if spec is None:
        known = ", ".join(sorted(specs))
        problems.append(f"{lines.where(('adapter',))}: unknown adapter {adapter!r} ({known})")
        faulty.add(None)
        # Without the adapter its keys are unknown: check the common keys only.
        raw = {k: v for k, v in raw.items() if k in _COMMON_KEYS}
    if "options" in raw:
        where = lines.where(("options",))
        problems.append(f"{where}: unknown key (adapter settings are top-level keys)")
        faulty.add("options")
        raw = {k: v for k, v in raw.items() if k != "options"}
    common, options_raw = _split(raw, spec)
    models = (ToolDeclaration, *((spec.options,) if spec is not None else ()))
    options: BaseModel | None = None
    try:
        if spec is not None:
            options = spec.options.model_validate(options_raw)
    except PydanticValidationError as exc:
        problems.extend(pydantic_problems(exc, lines, models[1:], echo=True))
        faulty.update(_top_keys(exc))
    try:
        ToolDeclaration.model_validate({**common, "options": options})
    except PydanticValidationError as exc:
        problems.extend(pydantic_problems(exc, lines, models, echo=True, hidden=_HIDDEN))
        faulty.update(_top_keys(exc))
    return problems, faulty


def _top_keys(exc: PydanticValidationError) -> set[str | int | None]:
    return {err["loc"][0] if err["loc"] else None for err in exc.errors(include_url=False)}


def _check(tool: ToolDeclaration, lines: Lines, spec: AdapterSpec) -> Iterable[str]:
    allowed = spec.operations.get(tool.operation)
    if allowed is None:
        known = ", ".join(sorted(spec.operations))
        yield (
            f"{lines.where(('operation',))}: the {spec.name} adapter has no operation "
            f"{tool.operation!r} ({known})"
        )
    elif tool.side_effect.value not in allowed:
        yield (
            f"{lines.where(('side_effect',))}: operation {tool.operation} has side effects "
            f"{sorted(allowed)}, not {tool.side_effect.value!r}"
        )
    yield from _check_input(tool, lines)
    yield from _check_output(tool, lines)
    yield from _check_paths(tool, lines, spec)
    yield from _check_editable(tool, lines)
    yield from _check_templates(tool, lines, spec)
    yield from _check_probes(tool, lines, spec)


def _check_input(tool: ToolDeclaration, lines: Lines) -> Iterable[str]:
    yield from validate_cerberus_schema(tool.input, lines.where(("input",)))


# Rules that change a document instead of checking it: an output is published as the adapter
# returned it, so a schema that would have to fill in or rename a field to accept the data
# would call conforming what its JSON Schema refuses.
_NORMALISING = frozenset(
    {"default", "default_setter", "coerce", "rename", "rename_handler", "purge_unknown"}
)


def _check_output(tool: ToolDeclaration, lines: Lines) -> Iterable[str]:
    """``output:`` is a cerberus schema like ``input:``, that checks and never normalises."""
    if tool.output is None:
        return
    where = lines.where(("output",))
    problems = validate_cerberus_schema(tool.output, where)
    if problems:
        yield from problems
        return
    found = {(u["path"], u["rule"]) for u in unmapped_rules(tool.output)}
    found |= set(_defaults(cerberus_to_json_schema(tool.output), ""))
    for path, rule in sorted(found):
        if rule in _NORMALISING:
            top = path.split(".")[0].split("[")[0]
            at = lines.where(("output", top)) if top and top != "*" else where
            yield (
                f"{at}: {rule!r} (at {path or 'the top'}) changes the data instead of "
                "checking it; an output schema only checks"
            )


def _defaults(schema: Any, path: str) -> Iterable[tuple[str, str]]:
    """``(path, "default")`` for each field of a converted schema that has a default."""
    if not isinstance(schema, dict):
        if isinstance(schema, list):
            for item in schema:
                yield from _defaults(item, path)
        return
    if "default" in schema:
        yield path, "default"
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            for name, sub in value.items():
                yield from _defaults(sub, f"{path}.{name}" if path else str(name))
        elif key != "default":
            yield from _defaults(value, path)


def _check_paths(tool: ToolDeclaration, lines: Lines, spec: AdapterSpec) -> Iterable[str]:
    for i, name in enumerate(tool.paths):
        rule = _rule_at(tool.input, name.split("."))
        if not isinstance(rule, dict):
            yield f"{lines.where(('paths', i))}: path argument {name!r} is not in input"
        elif rule.get("type") != "string":
            yield f"{lines.where(('paths', i))}: path argument {name!r} must have type: string"
    needed = spec.path_arguments.get(tool.operation, spec.path_arguments.get("*", frozenset()))
    for name in sorted(needed - set(tool.paths)):
        yield f"{lines.where(('paths',))}: the {spec.name} adapter needs {name!r} listed in paths"


def _check_editable(tool: ToolDeclaration, lines: Lines) -> Iterable[str]:
    """Each editable argument is a top-level argument the input schema declares, once."""
    seen: set[str] = set()
    for i, name in enumerate(tool.approval.editable):
        where = lines.where(("approval", "editable", i))
        if name not in tool.input:
            known = ", ".join(sorted(tool.input)) or "none"
            yield f"{where}: editable argument {name!r} is not in input (arguments: {known})"
        elif name in seen:
            yield f"{where}: editable argument {name!r} is listed twice"
        seen.add(name)


def _rule_at(schema: Mapping[str, Any], parts: list[str]) -> Any:
    """The cerberus rule a dotted path spec names (``files.*.path`` walks list items)."""
    rule: Any = {"type": "dict", "schema": schema}
    for part in parts:
        if not isinstance(rule, dict):
            return None
        if part == "*":
            rule = rule.get("schema") if rule.get("type") == "list" else None
        else:
            nested = rule.get("schema") if rule.get("type") == "dict" else None
            rule = nested.get(part) if isinstance(nested, dict) else None
    return rule


def _templates(tool: ToolDeclaration) -> Iterable[tuple[tuple[str | int, ...], Template]]:
    for i, lock in enumerate(tool.locks):
        yield ("locks", i, "key"), lock.key
    for field in ("verify", "reconcile", "state_guards"):
        for i, decl in enumerate(getattr(tool, field)):
            for key, template in decl.params.items():
                yield (field, i, key), template
            if isinstance(decl, ProbeDecl) and decl.equals is not None:
                yield (field, i, "equals"), decl.equals
    options = tool.options
    if isinstance(options, Templating):
        yield from options.templates()


def _check_templates(tool: ToolDeclaration, lines: Lines, spec: AdapterSpec) -> Iterable[str]:
    """Every hole of every template names something a call will have: an argument the
    input schema declares (down to nested fields), or a field of another root; and an
    argument that a call may leave out only where the adapter knows what to do then."""
    for loc, template in _templates(tool):
        faults = [f for ref in template.references if (f := _reference_fault(ref, tool.input))]
        for fault in faults:
            yield f"{lines.where(loc)}: template {template.source!r} uses {fault}"
        absent = None if faults else _absent_fault(template, tool.input)
        if absent is not None and not _fills_absent(tool, loc, template):
            hint = spec.absent_hint.get(str(loc[0]), "")
            hint = f"; or {hint}" if hint else ""
            yield (
                f"{lines.where(loc)}: template {template.source!r} has no value when "
                f"{absent}: give it a default or make it required{hint}"
            )
        wildcard = _wildcard_fault(template, is_lock_key=loc[0] == "locks")
        if wildcard is not None:
            yield f"{lines.where(loc)}: template {template.source!r}: {wildcard}"


def _fills_absent(tool: ToolDeclaration, loc: Loc, template: Template) -> bool:
    options = tool.options
    return isinstance(options, FillsAbsent) and options.fills_absent(loc, template)


def _absent_fault(template: Template, schema: Mapping[str, Any]) -> str | None:
    """When a hole may have no value: an argument a call may leave out, with no default to
    fill in, or a field below a nullable one (None when every hole always has a value)."""
    for ref in template.references:
        if ref[0] != "arguments":
            continue
        rule: Any = {"type": "dict", "schema": schema}
        for i, part in enumerate(ref[1:], start=1):
            nested = rule.get("schema") if isinstance(rule, dict) else None
            if not isinstance(nested, dict):
                break  # a shape the schema leaves open, or a scalar: checked elsewhere
            if rule.get("type") == "list":
                rule = nested
                continue
            rule = nested.get(part)
            if not isinstance(rule, dict):
                break
            name = ".".join(ref[1 : i + 1])
            has_default = "default" in rule or "default_setter" in rule
            if not rule.get("required") and not has_default:
                return f"a call leaves out the optional argument {name!r} (no default)"
            if rule.get("nullable") and i + 1 < len(ref):
                return f"the nullable argument {name!r} is null (null has no fields)"
    return None


def _wildcard_fault(template: Template, is_lock_key: bool) -> str | None:
    """``*`` walks one list, and only a lock key renders once per item."""
    walks = {ref[: ref.index("*") + 1] for ref in template.references if "*" in ref}
    if not walks:
        return None
    if not is_lock_key:
        return "a '*' hole renders once per list item, which only a lock key can do"
    many = any(ref.count("*") > 1 for ref in template.references)
    if len(walks) > 1 or many:
        return "a lock key walks one list: every '*' hole must name the same list, once"
    return None


def _reference_fault(ref: tuple[str, ...], schema: Mapping[str, Any]) -> str | None:
    root, rest = ref[0], ref[1:]
    if root == "arguments":
        return _argument_fault(ref, schema)
    fields = FIELDS[root]
    dotted = ".".join(ref)
    if not rest:
        return None  # the whole root, as JSON
    if rest[0] not in fields:
        known = ", ".join(f"{root}.{name}" for name in sorted(fields))
        return f"{'.'.join(ref[:2])}, which no call has (known: {known})"
    if len(rest) > 1:
        return f"{dotted}, but {'.'.join(ref[:2])} is text and has no fields"
    return None


_SCALARS = frozenset({"string", "integer", "float", "number", "boolean", "binary"})
_SCALARS |= frozenset({"date", "datetime"})


def _argument_fault(ref: tuple[str, ...], schema: Mapping[str, Any]) -> str | None:
    """Walk ``arguments.a.b`` / ``arguments.items.*.x`` through the cerberus schema, as far
    as the schema describes the value's shape."""
    rule: Any = {"type": "dict", "schema": schema}
    for i, part in enumerate(ref[1:], start=1):
        here = ".".join(ref[:i])
        kind = rule.get("type") if isinstance(rule, dict) else None
        nested = rule.get("schema") if isinstance(rule, dict) else None
        if kind == "dict" and isinstance(nested, dict) and not rule.get("allow_unknown"):
            if part not in nested:
                what = "input does not declare" if i == 1 else f"{here} does not declare"
                return f"{'.'.join(ref[: i + 1])}, which {what}"
            rule = nested[part]
        elif kind == "list" and isinstance(nested, dict):
            if part != "*" and not part.isdigit():
                return f"{'.'.join(ref)}, but {here} is a list (use {here}.* or an index)"
            rule = nested
        elif isinstance(kind, str) and kind in _SCALARS:
            return f"{'.'.join(ref)}, but {here} is a {kind} and has no fields"
        else:
            return None  # a shape the schema leaves open: only the call can tell
    return None


def _check_probes(tool: ToolDeclaration, lines: Lines, spec: AdapterSpec) -> Iterable[str]:
    for field in ("verify", "reconcile"):
        for i, probe in enumerate(getattr(tool, field)):
            yield from _check_probe(probe.probe, probe.params, (field, i), lines, spec)
    for i, guard in enumerate(tool.state_guards):
        yield from _check_probe(guard.actual, guard.params, ("state_guards", i), lines, spec)


def _check_probe(
    name: str,
    params: Mapping[str, Template],
    loc: tuple[str | int, ...],
    lines: Lines,
    spec: AdapterSpec,
) -> Iterable[str]:
    required = spec.probes.get(name)
    if required is None:
        known = ", ".join(sorted(spec.probes)) or "none"
        yield f"{lines.where(loc)}: the {spec.name} adapter has no probe {name!r} ({known})"
        return
    for missing in sorted(required - set(params)):
        yield f"{lines.where(loc)}: probe {name!r} needs the parameter {missing!r}"


def declaration_json_schema(specs: Mapping[str, AdapterSpec]) -> dict[str, Any]:
    """The JSON Schema of a declaration file for editors: the common keys plus every
    adapter's own top-level keys (each described with the adapters it belongs to)."""
    schema = ToolDeclaration.model_json_schema(mode="validation")
    props: dict[str, Any] = schema["properties"]
    props.pop("options", None)
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    owners: dict[str, list[str]] = {}
    for name, spec in sorted(specs.items()):
        extra = spec.options.model_json_schema(mode="validation")
        defs.update(extra.pop("$defs", {}))
        for key, prop in extra.get("properties", {}).items():
            if key in props and key not in owners:
                continue  # a common key wins
            owners.setdefault(key, []).append(name)
            if key in props:
                props[key] = {"anyOf": [props[key], prop]} if props[key] != prop else prop
            else:
                props[key] = prop
    for key, adapters in owners.items():
        props[key] = {
            **props[key],
            "description": f"(adapter: {', '.join(adapters)}) "
            + str(props[key].get("description", "")),
        }
    schema["additionalProperties"] = False
    return schema
